"""Which learner image a job runs, and the gate that refuses untested or unscanned ones."""
