"""Local services for developers, tests, benchmarks and the demo: etcd, SeaweedFS (S3) and Prometheus."""
