"""Backends deploy a job's learners: ``k8s_objects`` builds the objects, ``k8s`` speaks the raw API."""
