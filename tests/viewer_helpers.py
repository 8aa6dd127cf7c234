"""A run worth looking at, for the viewer's tests: a snapshot with real code and an answer
key, a critic run with its prompt, a conversation with the model, container logs and issues
(some of them hostile text), graded by tiered@2 (active) and tiered@1."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import orjson

from props.core.domain import catalog, specimens
from props.core.log.events import Event
from props.core.log.store import EventStore
from props.core.scoring import registration, rescoring, scorers
from props.projections import engine

SLUG = "viewed/2026-03-01-00"
HOSTILE = ["<script>alert(1)</script>", "[/x] [bold]not markup[/bold]", "{{7*7}}",
           "rtl \u202eevil\u202c and zero\u200bwidth"]
CODE = "\n".join(f"line_{n} = {n}  # code of line {n}" for n in range(1, 101)) + "\n"


def _loc(line: int, end: int | None = None) -> list[catalog.Location]:
    return [catalog.Location(file="app.py",
                             ranges=[catalog.LineRange(start=line, end=end or line)])]


GROUND_TRUTH = catalog.GroundTruth(
    true_positives=[
        catalog.TruePositive(id="T1", rationale="the total is off by one",
                             occurrences=[catalog.Occurrence(locations=_loc(10, 11))]),
        catalog.TruePositive(id="T2", rationale="a file handle is never closed",
                             occurrences=[catalog.Occurrence(locations=_loc(50))])],
    false_positives=[
        catalog.FalsePositive(id="D1", rationale="looks racy, is guarded by the lock",
                              relevant_files=["app.py"],
                              occurrences=[catalog.Occurrence(locations=_loc(80))])],
    file_sets=[], scopes=[catalog.Scope(files_hash=None, occurrences=["T1#1", "T2#1"])])


@dataclass(frozen=True)
class Viewed:
    run_id: uuid.UUID
    turns: int


async def viewed_run(store: EventStore, *, turns: int = 3, extra_issues: int = 0,
                     model: str = "model-a") -> Viewed:
    """The snapshot (once) and one graded run; `extra_issues` more issues that match
    nothing, `turns` model calls."""
    if not await store.read_stream(f"snapshot-{SLUG}"):
        sha = await store.put_blob(CODE.encode())
        await store.append(f"snapshot-{SLUG}", [catalog.SnapshotSynced(
            slug=SLUG, version=1, source="test", ground_truth=GROUND_TRUTH,
            ground_truth_hash=specimens.ground_truth_hash(GROUND_TRUTH),
            files=[catalog.FileEntry(path="app.py", sha256=sha, size=len(CODE))])])
    run = uuid.uuid4()
    prompt = await store.put_blob(b"Review app.py. " + HOSTILE[0].encode())
    logs = await store.put_blob(("container log: " + HOSTILE[3]).encode())
    events: list[Event] = [
        catalog.RunRequested(run_id=run, agent_type="critic", definition="viewer-critic",
                             example=catalog.Example(snapshot=SLUG), model=model,
                             timeout_seconds=60, budget_usd=1),
        catalog.RunStarted(run_id=run, digest="sha256:" + "ab" * 32),
        catalog.PromptComposed(run_id=run, prompt_sha256=prompt, size=20)]
    history: list[str] = [await store.put_blob(orjson.dumps(
        {"role": "system", "content": "You review code."}))]
    for n in range(1, turns + 1):
        history.append(await store.put_blob(orjson.dumps(
            {"role": "user", "content": f"question {n}: {HOSTILE[n % len(HOSTILE)]}"})))
        answer = await store.put_blob(orjson.dumps(
            {"role": "assistant", "content": f"answer {n}"}))
        events += [catalog.LlmRequested(run_id=run, request_id=f"r{n}", model=model,
                                        message_sha256s=list(history)),
                   catalog.LlmResponded(run_id=run, request_id=f"r{n}", response_sha256=answer,
                                        tokens_in=100 * n, tokens_out=10, cost_usd=0.001,
                                        latency_ms=250)]
        history.append(answer)
    issues = {"i1": (_loc(10), "off by one: " + HOSTILE[0]),
              "i2": (_loc(80), "a race " + HOSTILE[1]),
              "i3": (_loc(30), "nothing here " + HOSTILE[2] + " " + HOSTILE[3])}
    issues.update({f"x{n:04d}": (_loc(1 + n % 100), f"extra {n}") for n in range(extra_issues)})
    events += [catalog.IssueReported(run_id=run, issue_id=i, rationale=text, locations=where)
               for i, (where, text) in issues.items()]
    events += [catalog.ContainerExited(run_id=run, exit_code=0, logs_sha256=logs,
                                       duration_seconds=3.5),
               catalog.RunFinished(run_id=run, status="completed", tokens_in=600,
                                   tokens_out=30, cost_usd=0.003)]
    await store.append(f"run-{run}", events)
    await engine.rebuild(store)
    for ref in ("tiered@1", "tiered@2"):
        await rescoring.rescore(store, scorers.scorer(ref), rescoring.Selection(run_ids=[run]))
    await registration.activate(store, "tiered", 2)
    await engine.rebuild(store)
    return Viewed(run, turns)
