"""The scheduler: queues jobs, admits them onto the cluster's capacity, deploys them through a backend.

The queue and admission core is pure logic with time passed in; it keeps no state that cannot be rebuilt
from the job records in etcd. Layers, each importing only those below it (``.importlinter`` enforces this):
``admission`` -> ``reasons`` -> ``queue`` -> ``placement`` -> ``capacity`` -> ``errors``.
"""
