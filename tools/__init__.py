"""The `props` command line (`cli` builds its parser from `commands/`, one light module per
area, and runs the handler a parser names, from `handlers/`), the HTTP API (`api/`), and the
tools around them: demo, chaos, benchmarks, the shipped samples.

May import every other package; nothing imports this one.
"""
