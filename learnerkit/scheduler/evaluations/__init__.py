"""Evaluations run after training: one learner + sidecar pair per evaluation, their outcomes in the job's record."""
