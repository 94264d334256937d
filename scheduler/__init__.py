"""The minimal scheduler: manifests, queue, job monitor and the backends that deploy learners.

The folder is ``scheduler/`` (DESIGN.md layout) and the import name is ``learnerkit_scheduler``, mapped
with setuptools ``package-dir`` like ``learnerkit_build``, so that it never collides with another
distribution's top-level ``scheduler`` module.
"""
