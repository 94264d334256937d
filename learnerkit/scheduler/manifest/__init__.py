"""A job's manifest: the model, its parser and the field checks. Pure: no I/O, no clock, no build tool."""
