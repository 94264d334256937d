"""Locks: every Debian package and Python distribution of an image, by version and sha256 of its file."""
