"""Real servers for tests (SeaweedFS for S3), started by pytest fixtures on free loopback ports."""
