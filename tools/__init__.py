"""The `props` command line and the tools around it (benchmarks, demo, schema description)."""
