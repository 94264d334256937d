"""What a job stored: its shipped logs, its result files and metric history, read back for the API (``reader``)."""
