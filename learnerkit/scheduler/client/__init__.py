"""The API's client side: the HTTP client, terminal views and the download of a job's files."""
