"""The minimal scheduler: FfDL manifests in, a queue with admission onto the cluster's capacity, a job monitor,
and backends (the local Docker engine, Kubernetes).

The scheduler keeps no state that cannot be rebuilt from the job records in etcd. Its sub-packages are rooms,
each named after one concept; the contract ``scheduler-rooms`` in ``.importlinter`` stacks them, and a room
imports only rooms below it, top to bottom:

- ``cli_job``, ``cli_scheduler``: the commands; ``factory``: builds the real scheduler for ``serve``;
- ``api`` (the REST API and its server), ``client`` (its HTTP client and terminal views);
- ``core``: the scheduler itself, its control loop, what it tracks, its planning and metrics;
- ``outputs``, ``modelcode``, ``images``, ``config``: what a job stored, its model code, its image, the settings;
- ``backends`` (Docker, Kubernetes), ``jobs`` (a job's state, its etcd record, its submission);
- ``admission`` (capacity, placement, the queue) and ``manifest``: pure, no I/O and no clock;
- ``facade`` (what the API sees of the scheduler) and ``errors``.
"""
