"""Reproducibility: a built image made a function of its content (clamped times, a canonical config), tar streams,
and what differs between two builds."""
