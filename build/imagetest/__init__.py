"""Image tests: learner containers run as the platform runs them, the contract checks, what an image holds for its
accelerator, and the smoke check."""
