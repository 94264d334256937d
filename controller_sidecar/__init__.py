"""The controller sidecar: one framework-agnostic process beside every learner.

It downloads the job's data, model code and (on resume) checkpoints, starts the learner through the
control files of the learner contract, reports each phase to etcd, watches the job's halt key, tails the
learner's log and metrics, and stores results, logs and checkpoints in the object store.

Layers, each importing only those below it (``.importlinter`` enforces this):
``cli`` -> ``runtime`` -> ``phases`` -> the I/O adapters (``etcdstore``, ``s3store``, ``logship``...) ->
the pure core (``settings``, ``status``, ``keys``, ``retry``, ``clock``, ``errors``).
"""
