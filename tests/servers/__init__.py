"""Real servers for tests (etcd, SeaweedFS for S3), started as pytest session fixtures on free loopback ports."""
