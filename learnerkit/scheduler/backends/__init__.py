"""Backends deploy a job's learners (``protocol``: what the scheduler asks of one): ``docker`` on the local engine;
``k8s_objects`` builds the Kubernetes objects, ``k8s`` speaks the raw API."""
