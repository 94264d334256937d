"""Preemption: which running jobs a queued job of higher priority halts to take their room (pure)."""
