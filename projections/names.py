"""The projections' names and the schemas they live in, importable without loading them (the
command line offers them as choices). The engine checks at import that they are the
projections' own."""

from __future__ import annotations

# `--reader-grace`: how long a rebuild's swap waits for analysts' readers before it ends them
# (props.projections.readers), here so that the command line can offer it without loading them.
READER_GRACE_SECONDS = 30.0

NAMES = ("ground_truth", "runs", "issues", "usage", "grading", "imports", "exclusions")
LIVE = "projections"  # the analysts' schema
SHADOW = "projections_next"  # where a rebuild builds, before the swap
