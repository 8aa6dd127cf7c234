"""The `props` command line (`cli` dispatches to `commands/`, one module per area), the HTTP
API (`api/`), and the tools around them: demo, chaos, benchmarks, the shipped samples.

May import every other package; nothing imports this one.
"""
