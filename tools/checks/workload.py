"""A realistic, reproducible log: critic runs on the sample specimens, with their issues,
LLM calls and grades. Used by the benchmarks and by tests that need thousands of events of
every type.

Each run reports some issues on real TP and FP locations of its example and some that match
nothing; completed runs are graded by the historic scorer `overlap@1` (the real one), and
`overlap@2` is registered for re-scoring. A fixed seed gives the same log every time.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Callable

from props.core.domain import catalog, streams
from props.core.domain.specimens import specimen_sync, specimens
from props.core.log.events import Event, NewEvent
from props.core.log.store import EventStore
from props.core.scoring import scorers
from props.tools.bundled.samples import samples_dir

MODELS = ["model-a", "model-b", "model-c"]
DEFINITIONS = ["reviewer", "strict-reviewer"]
STATUSES = ["completed"] * 16 + ["failed", "timed_out", "budget_exceeded", "cancelled"]
HISTORIC = scorers.rule("overlap@1")


def _uuid(rng: random.Random) -> uuid.UUID:
    return uuid.UUID(int=rng.getrandbits(128), version=4)


class Workload:
    def __init__(self, seed: int = 7, issues_per_run: tuple[int, int] = (1, 7)) -> None:
        self.rng = random.Random(seed)
        self.found = specimens.discover(samples_dir())[0]
        self.issues_per_run = issues_per_run

    async def setup(self, store: EventStore) -> int:
        """Specimens, a definition and two scorers (the second one active). Returns events."""
        report = await specimen_sync.sync(store, str(samples_dir()), self.found)
        count = report.appended
        digest = "sha256:" + hashlib.sha256(b"reviewer").hexdigest()
        await store.append("definition-critic", [catalog.DefinitionPushed(
            agent_type="critic", name="reviewer", tag="latest", digest=digest)])
        for ref in ("overlap@1", "overlap@2"):
            await store.append("scorer-overlap",
                               [scorers.registration(scorers.scorer(ref))])
        await store.append("scorer-overlap", [catalog.ActiveScorerSet(name="overlap",
                                                                      version=1)])
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
        issues = self._issues(run, gt, set(files))
        events.extend(issues)
        matches = HISTORIC.match_run({i.issue_id: i.locations for i in issues}, gt)
        grades: list[Event] = [
            scorers.grade_event(HISTORIC, run, i.issue_id, matches[i.issue_id], gt_hash)
            for i in issues
        ]
        events.append(catalog.PhaseCompleted(run_id=run, phase="review",
                                             duration_seconds=rng.uniform(5, 120)))
        if status == "cancelled":
            events.append(catalog.RunCancelRequested(run_id=run, requested_by="workload"))
        events.append(catalog.ContainerExited(run_id=run, exit_code=0 if status == "completed"
                                              else rng.choice([1, 137, None]),
                                              duration_seconds=rng.uniform(5, 130)))
        failure = None if status == "completed" else catalog.Failure.of("review", status)
        events.append(catalog.RunFinished(run_id=run, status=status, failure=failure,
                                          tokens_in=tokens_in, tokens_out=tokens_out,
                                          cost_usd=round(cost, 6)))
        if status != "completed":
            grades = []  # unfinished evidence: only completed runs were graded here
        return run, events, grades

    def _issues(self, run: uuid.UUID, gt: catalog.GroundTruth,
                files: set[str]) -> list[catalog.IssueReported]:
        """Issues at real TP and FP locations of the example, and a few that match nothing."""
        rng = self.rng
        places: list[tuple[str, catalog.Location]] = []
        for tp in gt.true_positives:
            for occ in tp.occurrences:
                if occ.files <= files:
                    places.append((tp.id, occ.locations[0]))
        for fp in gt.false_positives:
            for occ in fp.occurrences:
                if occ.files <= files:
                    places.append((fp.id, occ.locations[0]))
        low, high = self.issues_per_run
        wanted = rng.randint(low, high)
        picked = rng.sample(places, k=min(len(places), max(1, wanted * 2 // 3)))
        out = [catalog.IssueReported(
            run_id=run, issue_id=f"i{i}", rationale=f"finding about {ident}",
            severity=rng.choice(["low", "medium", "high"]), locations=[loc])
            for i, (ident, loc) in enumerate(picked, start=1)]
        ordered = sorted(files)
        for j in range(max(0, wanted - len(out))):
            start = rng.randint(1, 60)
            out.append(catalog.IssueReported(
                run_id=run, issue_id=f"u{j}", rationale="a style remark",
                locations=[catalog.Location(file=rng.choice(ordered), ranges=[
                    catalog.LineRange(start=start, end=start + rng.randint(0, 3))])]))
        return out

    async def append_runs(self, store: EventStore, runs: int,
                          progress: Callable[[int], None] | None = None) -> int:
        """Append `runs` critic runs with their grades; return the number of events."""
        total = 0
        for _ in range(runs):
            run, events, grades = self.run_events()
            await store.append(streams.run(run), [NewEvent(e, _uuid(self.rng)) for e in events],
                               expected_version=0)
            total += len(events)
            if grades:
                await store.append(streams.grading(run, scorers.ref(HISTORIC)),
                                   [NewEvent(e, _uuid(self.rng)) for e in grades],
                                   expected_version=0)
                total += len(grades)
            if progress:
                progress(len(events) + len(grades))
        return total
