"""Every job's signed provenance: what produced its results, bound to their bytes (docs/provenance.md)."""
