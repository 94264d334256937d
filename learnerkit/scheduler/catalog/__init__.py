"""The model catalog: versions as OCI artifacts with their signed documents as referrers, aliases moved on proof."""
