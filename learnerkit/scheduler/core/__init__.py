"""The scheduler itself: the verbs the API calls, the control loop, and what it tracks of each job."""
