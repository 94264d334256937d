"""A job's model code: the archive check, the zip window it reads, and the upload into the results store."""
