"""The ids of grading events, derived from what they grade: a retried append, or the same
rescore run twice, stores each once."""

from __future__ import annotations

import hashlib
import uuid

from props.core.domain import catalog
from props.core.log import bulk

_NAMESPACE = uuid.UUID("0b8f6f57-3c8a-4f64-8d57-2b3f3f1a9e21")


def unscorable_id(e: catalog.GradesUnscorable) -> uuid.UUID:
    """One per run, scorer and ground truth: a retried append stores it once."""
    s = e.scorer
    name = f"{e.critique_run_id}:unscorable:{s.name}@{s.version}:{s.ground_truth_hash}"
    return uuid.uuid5(_NAMESPACE, name)


def grade_id(grade: catalog.GradeEmitted, rule: str | None = None) -> uuid.UUID:
    """One per (run, issue, scorer, ground truth), and the candidate rule (`rule`) when it
    kept some issue of the run from the location rule: a run graded before the rule existed
    is graded again by it (its new grades replace the old), once."""
    s = grade.scorer
    name = (f"{grade.critique_run_id}:{grade.critique_issue_id}:{s.name}@{s.version}:"
            f"{s.ground_truth_hash}") + (f":{rule}" if rule else "")
    return bulk.uuid_from_hash(hashlib.sha1(_NAMESPACE.bytes + name.encode()).digest(), 5)
