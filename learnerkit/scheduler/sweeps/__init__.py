"""Sweeps: a hyperparameter search as a group of trials, and the pure decisions that run it (docs/sweeps.md)."""
