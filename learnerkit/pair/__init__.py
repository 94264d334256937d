"""A learner + controller sidecar pair on the local Docker engine, sharing one ``/job`` volume.

``learnerkit sidecar run-local`` runs one by hand; the scheduler's Docker backend builds on the same
``spec`` and ``docker`` modules. Layers, each importing only those below it (``.importlinter`` enforces this):
``cli_sidecar`` -> ``runlocal`` -> ``follow``, ``etcd`` -> ``docker`` -> ``jobdisk`` -> ``spec``, ``cgroups``.
"""
