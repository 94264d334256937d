"""A job's metric series for charts: read from the stored history into columns, cut to a range, thinned to what a
chart can draw (docs/api.md, "Metric series")."""
