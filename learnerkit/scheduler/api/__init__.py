"""The REST API: the app, its token checks and rate limits, the multipart submit, and the server."""
