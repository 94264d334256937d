"""Attestations: the signed documents of a published image (in-toto Statements in DSSE envelopes, SLSA provenance,
OpenVEX) and the publisher's key."""
