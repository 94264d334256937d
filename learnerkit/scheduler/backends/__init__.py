"""Backends deploy a job's learners (``protocol``: what the scheduler asks of one): ``deployment`` says what,
backend-neutral; ``docker`` runs the pairs on the local engine; ``k8s`` drives Kubernetes over ``k8s_cluster`` (the
API client) and ``k8s_objects`` (the objects)."""
