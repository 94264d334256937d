"""Publish and verify: the gates (tested, scanned, no pending security update), the push through a fresh layout,
attestations as OCI referrers, and the registry client."""
