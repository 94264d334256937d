"""`learnerkit image scan`: what is in an image, what known weakness it carries, which policy it breaks.

Modules, bottom to top (the `scan-layers` contract): `model` (results), `layers` (the `docker save` index) and
`packages`, with `lint` (hadolint over rendered Dockerfiles, `image lint`) beside them; the checks
(`checks_config`, `checks_history`, `checks_fs`, `secrets`, `hadolint`), `sbom`, the vulnerability signals
(`debian_security`, `osv`); `policy` (gate and allowlist), `runner`, `reports`, `records`; at the top `command`
(`image scan`: what to scan, the records kept) and `outdated` (built images with pending security updates).
"""
