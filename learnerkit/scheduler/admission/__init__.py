"""Which queued job runs where: capacity, placement, the queue, the reasons a job waits, and the stages of a job's
cycle. Pure: no I/O, no clock."""
