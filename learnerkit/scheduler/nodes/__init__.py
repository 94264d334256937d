"""The cluster's nodes as the scheduler's operators see them: which are known, which are drained."""
