"""A realistic, reproducible log: critic runs on the sample specimens, with their issues,
LLM calls and grades. Used by the projection benchmark and by tests that need thousands of
events of every type.

Each run reports some issues on real TP and FP locations of its example and some that match
nothing; grades come from two scorer versions. A fixed seed gives the same log every time.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Callable

from props.core import catalog, specimen_sync, specimens
from props.core.events import Event, NewEvent
from props.core.store import EventStore
from props.tools.specimen_commands import samples_dir

MODELS = ["model-a", "model-b", "model-c"]
DEFINITIONS = ["reviewer", "strict-reviewer"]
STATUSES = ["completed"] * 16 + ["failed", "timed_out", "budget_exceeded", "cancelled"]
SCORER_CODE = {1: hashlib.sha256(b"overlap@1").hexdigest(),
               2: hashlib.sha256(b"overlap@2").hexdigest()}


def _uuid(rng: random.Random) -> uuid.UUID:
    return uuid.UUID(int=rng.getrandbits(128), version=4)


class Workload:
    def __init__(self, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.found = specimens.discover(samples_dir())[0]

    async def setup(self, store: EventStore) -> int:
        """Specimens, a definition and two scorers (the second one active). Returns events."""
        report = await specimen_sync.sync(store, str(samples_dir()), self.found)
        count = report.appended
        digest = "sha256:" + hashlib.sha256(b"reviewer").hexdigest()
        await store.append("definition-critic", [catalog.DefinitionPushed(
            agent_type="critic", name="reviewer", tag="latest", digest=digest)])
        for version in (1, 2):
            await store.append("scorer-overlap", [catalog.ScorerRegistered(
                name="overlap", version=version, code_hash=SCORER_CODE[version],
                settings={"min_overlap": 0.5})])
        await store.append("scorer-overlap", [catalog.ActiveScorerSet(name="overlap",
                                                                      version=2)])
        return count + 4

    def run_events(self) -> tuple[uuid.UUID, list[Event], list[Event]]:
        """One critic run: its own events, and the grades of its issues."""
        rng = self.rng
        run = _uuid(rng)
        specimen = rng.choice(self.found)
        gt = specimen.ground_truth
        file_set = rng.choice([None, *gt.file_sets])
        files = sorted(specimen.files) if file_set is None else file_set.files
        example = catalog.Example(snapshot=specimen.slug,
                                  files_hash=None if file_set is None else file_set.files_hash)
        gt_hash = specimens.ground_truth_hash(gt)
        status = rng.choice(STATUSES)
        sha = hashlib.sha256(run.bytes).hexdigest()
        events: list[Event] = [
            catalog.RunRequested(run_id=run, agent_type="critic",
                                 definition=rng.choice(DEFINITIONS), example=example,
                                 model=rng.choice(MODELS), timeout_seconds=600, budget_usd=2.0),
            catalog.RunStarted(run_id=run, digest="sha256:" + "ab" * 32),
            catalog.ContainerStarted(run_id=run, runtime="docker",
                                     container_name=f"props-run-{run}", container_id=sha[:12]),
            catalog.PromptComposed(run_id=run, prompt_sha256=sha, size=4096),
        ]
        tokens_in = tokens_out = 0
        cost = 0.0
        for n in range(rng.randint(1, 4)):
            t_in, t_out = rng.randint(500, 5000), rng.randint(100, 1500)
            tokens_in += t_in
            tokens_out += t_out
            cost += round((t_in + 4 * t_out) * 1e-6, 6)
            events.append(catalog.LlmRequested(run_id=run, request_id=str(n), model="m",
                                               message_sha256s=[sha]))
            events.append(catalog.LlmResponded(run_id=run, request_id=str(n),
                                               response_sha256=sha, tokens_in=t_in,
                                               tokens_out=t_out,
                                               cost_usd=round((t_in + 4 * t_out) * 1e-6, 6),
                                               latency_ms=rng.uniform(200, 3000)))
        grades: list[Event] = []
        issues = self._issues(run, gt, set(files))
        for issue, match in issues:
            events.append(issue)
            for version in (1, 2):
                if version == 1 and rng.random() < 0.3:
                    continue  # the old scorer graded only part of the history
                kind, ident, occ = match if (version == 2 or rng.random() < 0.8) else ("", "", 0)
                grades.append(catalog.GradeEmitted(
                    critique_run_id=run, critique_issue_id=issue.issue_id,
                    tp_id=ident if kind == "tp" else None,
                    tp_occurrence=occ if kind == "tp" else None,
                    fp_id=ident if kind == "fp" else None,
                    grade=1.0 if kind == "tp" else 0.0,
                    scorer=catalog.ScorerRef(name="overlap", version=version,
                                             code_hash=SCORER_CODE[version],
                                             ground_truth_hash=gt_hash)))
        events.append(catalog.PhaseCompleted(run_id=run, phase="review",
                                             duration_seconds=rng.uniform(5, 120)))
        events.append(catalog.ContainerExited(run_id=run, exit_code=0 if status == "completed"
                                              else rng.choice([1, 137, None]),
                                              duration_seconds=rng.uniform(5, 130)))
        failure = None if status == "completed" else catalog.Failure(
            phase="review", category=status, retryable=status != "failed")
        events.append(catalog.RunFinished(run_id=run, status=status, failure=failure,
                                          tokens_in=tokens_in, tokens_out=tokens_out,
                                          cost_usd=round(cost, 6)))
        if status != "completed":
            grades = []  # unfinished evidence: only completed runs were graded here
        return run, events, grades

    def _issues(self, run: uuid.UUID, gt: catalog.GroundTruth, files: set[str]
                ) -> list[tuple[catalog.IssueReported, tuple[str, str, int]]]:
        rng = self.rng
        candidates: list[tuple[str, str, int, catalog.Location]] = []
        for tp in gt.true_positives:
            for n, occ in enumerate(tp.occurrences, start=1):
                if occ.files <= files:
                    candidates.append(("tp", tp.id, n, occ.locations[0]))
        for fp in gt.false_positives:
            for occ in fp.occurrences:
                if occ.files <= files:
                    candidates.append(("fp", fp.id, 0, occ.locations[0]))
        picked = rng.sample(candidates, k=min(len(candidates), rng.randint(1, 5)))
        out = []
        for i, (kind, ident, number, loc) in enumerate(picked, start=1):
            out.append((catalog.IssueReported(
                run_id=run, issue_id=f"i{i}", rationale=f"finding about {ident}",
                severity=rng.choice(["low", "medium", "high"]), locations=[loc]),
                (kind, ident, number)))
        some_file = rng.choice(sorted(files))
        for j in range(rng.randint(0, 2)):
            out.append((catalog.IssueReported(
                run_id=run, issue_id=f"u{j}", rationale="a style remark",
                locations=[catalog.Location(file=some_file,
                                            ranges=[catalog.LineRange(start=1, end=2)])]),
                ("", "", 0)))
        return out

    async def append_runs(self, store: EventStore, runs: int,
                          progress: Callable[[int], None] | None = None) -> int:
        """Append `runs` critic runs with their grades; return the number of events."""
        total = 0
        for _ in range(runs):
            run, events, grades = self.run_events()
            await store.append(f"run-{run}", [NewEvent(e, _uuid(self.rng)) for e in events],
                               expected_version=0)
            total += len(events)
            by_scorer: dict[int, list[Event]] = {}
            for g in grades:
                assert isinstance(g, catalog.GradeEmitted)
                by_scorer.setdefault(g.scorer.version, []).append(g)
            for version, batch in sorted(by_scorer.items()):
                await store.append(f"grading-{run}-overlap@{version}",
                                   [NewEvent(e, _uuid(self.rng)) for e in batch],
                                   expected_version=0)
                total += len(batch)
            if progress:
                progress(len(events) + len(grades))
        return total
