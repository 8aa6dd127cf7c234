"""The reference grader: the tiered scorer, run as a grader container.

`python -m props.reactors.agents.reference_grader` inside a grader run. It reads what the
launcher gave it (PROPS_GRADING_DIR: the ground truth, the issues to grade, the scorer
reference), matches each critique run's issues with the location tiers and one-to-one
assignment of the default scorer (`tiered@2`), and reports one `grade.emitted` per issue.
Deterministic: the same inputs give the same grades. It is the yardstick for grader images
of your own.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections import defaultdict
from pathlib import Path

from props.core.domain import catalog
from props.core.scoring import scorers
from props.reactors.agents.sdk import Agent
from props.reactors.launcher import grader_runs


def main() -> int:
    folder = Path(os.environ["PROPS_GRADING_DIR"])
    gt = catalog.GroundTruth.model_validate_json((folder / grader_runs.GROUND_TRUTH).read_text())
    ref = catalog.ScorerRef.model_validate_json((folder / grader_runs.SCORER).read_text())
    by_run: dict[str, dict[str, list[catalog.Location]]] = defaultdict(dict)
    for line in (folder / grader_runs.ISSUES).read_text().splitlines():
        item = json.loads(line)
        by_run[item["run_id"]][item["issue_id"]] = [
            catalog.Location.model_validate(loc) for loc in item["locations"]]
    tiers = scorers.SCORERS[scorers.DEFAULT_SCORER]
    graded = 0
    with Agent.from_environment() as agent:
        for run_id, issues in sorted(by_run.items()):
            matches = tiers.match_run(issues, gt)
            for issue_id in sorted(issues):
                m = matches[issue_id]
                agent.report(catalog.GradeEmitted(
                    critique_run_id=uuid.UUID(run_id), critique_issue_id=issue_id,
                    tp_id=m.tp_id, tp_occurrence=m.tp_occurrence, fp_id=m.fp_id,
                    grade=m.grade, scorer=ref))
                graded += 1
        agent.phase("grading")
    print(f"graded {graded} issues of {len(by_run)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
