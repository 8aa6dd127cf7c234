"""notes: a tiny JSON notes service on the standard library."""
