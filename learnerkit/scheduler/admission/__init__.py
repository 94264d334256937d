"""Which queued job runs where: capacity, placement, the queue, the reasons a job waits. Pure: no I/O, no clock."""
