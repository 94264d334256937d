"""Builds: BuildKit, the local base image from its lock, learner and sidecar images built only when their inputs
changed, size budgets, prune, and what `image lock` locks."""
