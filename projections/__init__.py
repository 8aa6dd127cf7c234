"""Projections: the analysts' tables, derived from the log only, kept current by a runner and
rebuildable beside the live ones with an atomic swap; and the read models analysts use
(`figures`: the report; `run_pages`: runs and a run), which the CLI and the API both call.

May import: `props.core`, `props.schema`.
"""
