"""Projections: the analysts' tables, derived from the log only, kept current by a runner and
rebuildable beside the live ones with an atomic swap."""
