"""Benchmark suites: each measures props side by side with the raw PostgreSQL operation it is
built on, in one run on one database, and reports ratios as checks."""
