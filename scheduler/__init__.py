"""The minimal scheduler: FfDL manifests, the job queue, the job monitor and the backends."""
