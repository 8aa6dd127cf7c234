"""The projections' names and the schemas they live in, importable without loading them (the
command line offers them as choices). The engine checks at import that they are the
projections' own."""

from __future__ import annotations

NAMES = ("ground_truth", "runs", "issues", "usage", "grading", "imports", "exclusions")
LIVE = "projections"  # the analysts' schema
SHADOW = "projections_next"  # where a rebuild builds, before the swap
