"""The scheduler itself: the verbs the API calls, the control loop (with its restore after a restart and its
liveness checks), the state the two share, and what it tracks of each job."""
