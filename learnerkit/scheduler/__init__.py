"""The minimal scheduler: FfDL manifests in, a queue with admission onto the cluster's capacity, a job monitor,
and backends (the local Docker engine, Kubernetes).

The queue and admission core is pure logic with time passed in; the scheduler keeps no state that cannot be
rebuilt from the job records in etcd. ``.importlinter`` keeps the layers one way.
"""
