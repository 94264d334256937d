"""`learnerkit image scan`: what is in an image, what known weakness it carries, which policy it breaks.

Modules, bottom to top: `model` (results), `layers` (the `docker save` index), the checks (`checks_config`,
`checks_history`, `checks_fs`, `secrets`, `hadolint`), `sbom`, the vulnerability signals (`debian_security`,
`osv`), `policy` (gate and allowlist), `reports` and `runner`.
"""
