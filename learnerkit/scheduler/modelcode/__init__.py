"""A job's model code: received at submit into the results store (the upload), checked as it arrives (the archive
check and the zip window it reads)."""
