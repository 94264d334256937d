"""The scheduler's event stream: etcd's changes under the jobs' root, as per-tenant events with resumable positions."""
