"""Whether a recorded run can be graded, and its issues as a scorer takes them: the checks
every path of re-scoring (Python, the server, the grader reactor) makes alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pydantic

from props.core.domain import catalog, vocabulary

if TYPE_CHECKING:
    from props.core.scoring.rescoring import RunRecord

_LOCATIONS = pydantic.TypeAdapter(list[catalog.Location])
FINISHED = frozenset(vocabulary.TERMINAL_STATUSES)


def parse_issues(run: RunRecord) -> dict[str, list[catalog.Location] | str]:
    """Each issue's locations, or why they do not parse."""
    parsed: dict[str, list[catalog.Location] | str] = {}
    for issue_id, raw in run.issues.items():
        try:
            parsed[issue_id] = _LOCATIONS.validate_json(raw)
        except pydantic.ValidationError:
            parsed[issue_id] = "locations do not parse"
    return parsed


def run_unscorable_reason(run: RunRecord,
                          snapshot: catalog.SnapshotSynced | None) -> str | None:
    """Why a run cannot be graded whatever its issues say, if it cannot."""
    if run.status not in FINISHED:
        return "no finish event"
    if snapshot is None:
        return "ground truth missing"
    return None


def unscorable_reason(run: RunRecord, snapshot: catalog.SnapshotSynced | None,
                      parsed: dict[str, list[catalog.Location] | str]) -> str | None:
    if (reason := run_unscorable_reason(run, snapshot)) is not None:
        return reason
    assert snapshot is not None
    files = {f.path for f in snapshot.files}
    for issue_id, locations in sorted(parsed.items()):
        if isinstance(locations, str):
            return f"malformed issue: {issue_id}: {locations}"
        for loc in locations:
            if not loc.ranges:
                return f"malformed issue: {issue_id}: a location without line ranges"
            if loc.file not in files:
                return f"malformed issue: {issue_id}: {loc.file} is not in the snapshot"
    return None


def parsed_only(parsed: dict[str, list[catalog.Location] | str]
              ) -> dict[str, list[catalog.Location]]:
    issues = {i: locs for i, locs in parsed.items() if not isinstance(locs, str)}
    assert len(issues) == len(parsed)  # unscorable_reason refused malformed issues
    return issues


def reason_kind(reason: str) -> str:
    """"malformed issue: i3: ..." -> "malformed issue": what counts are kept by."""
    return reason.split(":", 1)[0]
