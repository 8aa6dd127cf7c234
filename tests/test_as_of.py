"""`props report --as-of`: a report from the log up to a point is, byte for byte, the report
that was taken when the projections stood there."""

from __future__ import annotations

import uuid

import orjson

from props.core.domain import catalog
from props.core.log.store import EventStore
from props.core.scoring import rescoring, scorers
from props.projections import engine
from tests.test_cli import props
from tests.test_strict_recall import ISSUES, SLUG, graded_run


async def more_history(store: EventStore, first_run: uuid.UUID) -> None:
    """What happens after the figure was quoted: a second run, graded; the first excluded."""
    run = uuid.uuid4()
    await store.append(f"run-{run}", [
        catalog.RunRequested(run_id=run, agent_type="critic", definition="crafted",
                             example=catalog.Example(snapshot=SLUG), model="m2",
                             timeout_seconds=60, budget_usd=1),
        *[catalog.IssueReported(run_id=run, issue_id=i, rationale="r", locations=locations)
          for i, locations in list(ISSUES.items())[:2]],
        catalog.RunFinished(run_id=run, status="completed")])
    await engine.rebuild(store)
    await rescoring.rescore(store, scorers.scorer("tiered@2"),
                            rescoring.Selection(everything=True))
    await store.append(f"run-{first_run}", [catalog.RunExcluded(
        run_id=first_run, reason="the image leaked the key")])
    await engine.rebuild(store)


async def test_a_report_as_of_a_point_is_the_report_taken_then(store: EventStore,
                                                               dsn: str) -> None:
    run = await graded_run(store)
    then_json = props("report", "--format", "json", dsn=dsn)
    then_table = props("report", dsn=dsn)
    assert then_json.returncode == 0 and then_table.returncode == 0, then_json.stderr
    point = orjson.loads(then_json.stdout)["evidence"]["as_of"]
    assert point is not None and f"--as-of {point}" in then_table.stdout
    await more_history(store, run)
    now = props("report", "--format", "json", dsn=dsn)
    assert now.stdout != then_json.stdout  # the negative control: the figures moved
    assert orjson.loads(now.stdout)["evidence"]["excluded"] == 1

    again = props("report", "--format", "json", "--as-of", point, dsn=dsn)
    assert again.returncode == 0, again.stderr
    assert again.stdout == then_json.stdout
    assert props("report", "--as-of", point, dsn=dsn).stdout == then_table.stdout
    # The same point named by its global position, and by the time of its event.
    tx, position = (int(x) for x in point.split(":"))
    assert props("report", "--format", "json", "--as-of", str(position),
                 dsn=dsn).stdout == then_json.stdout
    recorded = await store.pool.fetchval(
        "SELECT recorded_at FROM props.events WHERE global_position = $1", position)
    later = await store.pool.fetchval(
        "SELECT min(recorded_at) FROM props.events WHERE tx_id > $1::text::xid8", str(tx))
    assert later > recorded  # so the time names this very point
    assert props("report", "--format", "json", "--as-of", recorded.isoformat(),
                 dsn=dsn).stdout == then_json.stdout
    # The live projections were not touched, and nothing was left behind.
    assert props("report", "--format", "json", dsn=dsn).stdout == now.stdout


async def test_points_that_are_not_in_the_log_are_refused(store: EventStore,
                                                          dsn: str) -> None:
    await graded_run(store)
    before = await store.pool.fetchval("SELECT count(*) FROM props.events")
    head = await store.pool.fetchval("SELECT max(global_position) FROM props.events")
    for bad, says in [(str(head + 1000), "no such event"), ("0:1", "no such event"),
                      ("yesterday", "not TX:POSITION"), ("1:2:3", "not TX:POSITION"),
                      ("2026-01-01T00:00:00", "zone"),
                      ("1999-01-01T00:00:00+00:00", "no event recorded")]:
        out = props("report", "--as-of", bad, dsn=dsn)
        assert out.returncode == 65, (bad, out.stderr)
        assert says in out.stderr and out.stdout == "", (bad, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert await store.pool.fetchval("SELECT count(*) FROM props.events") == before

