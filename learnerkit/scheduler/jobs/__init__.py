"""A job as recorded: its state, its record in etcd, what was submitted with it, and where its objects live in S3
(and the clients that reach them)."""
