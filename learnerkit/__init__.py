"""learnerkit: hardened learner images, a controller sidecar and a minimal scheduler."""

__version__ = "0.1.0"
