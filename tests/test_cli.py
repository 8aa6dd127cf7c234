"""The `props` command as a user runs it: a real process, a real database."""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import sys
import uuid
from pathlib import Path

import orjson
import pytest

from props.core.domain import catalog
from props.core.domain.store import open_store

CLI = [sys.executable, "-m", "props.tools.cli"]


def props(*args: str, dsn: str, stdin: str | None = None,
          env: dict[str, str] | None = None, timeout: float = 900,
          ) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PROPS_DSN": dsn, **(env or {})}
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True,
                          env=full_env, timeout=timeout, check=False)


def event_json(**over: object) -> str:
    doc: dict[str, object] = {"stream": "run-cli", "type": "phase.completed",
           "data": {"run_id": str(uuid.uuid4()), "phase": "review", "duration_seconds": 1.0}}
    doc.update(over)
    return orjson.dumps(doc).decode()


@pytest.mark.parametrize("command", [
    [], ["db"], ["db", "migrate"], ["db", "status"], ["db", "dsn"], ["db", "stop"],
    ["db", "schema"], ["events"], ["events", "append"], ["events", "tail"], ["events", "types"],
    ["demo"], ["bench"], ["specimens"], ["specimens", "validate"], ["specimens", "sync"],
    ["specimens", "list"], ["specimens", "show"], ["specimens", "samples"],
    ["projections"], ["projections", "run"], ["projections", "status"],
    ["projections", "rebuild"], ["report"], ["scorers"], ["scorers", "list"],
    ["scorers", "register"], ["scorers", "activate"], ["rescore"], ["compare"],
    ["export"], ["import"], ["verify"],
])
def test_every_command_has_help(command: list[str]) -> None:
    out = subprocess.run([*CLI, *command, "--help"], capture_output=True, text=True,
                         check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "usage: props" in out.stdout and len(out.stdout) > 150


def test_migrate_status_dsn(empty_dsn: str) -> None:
    first = props("db", "migrate", dsn=empty_dsn)
    assert first.returncode == 0 and "applied 0001_log.sql" in first.stdout
    again = props("db", "migrate", dsn=empty_dsn)
    assert again.returncode == 0 and "up to date" in again.stdout
    status = props("db", "status", dsn=empty_dsn)
    assert status.returncode == 0, status.stderr
    assert "events: 0" in status.stdout and "fence is clear" in status.stdout
    assert props("db", "dsn", dsn=empty_dsn).stdout.strip() == empty_dsn


def test_status_of_an_unmigrated_database_says_what_to_do(empty_dsn: str) -> None:
    out = props("db", "status", dsn=empty_dsn)
    assert out.returncode == 1 and "props db migrate" in out.stdout


def test_append_then_tail(dsn: str) -> None:
    ok = props("events", "append", "-", dsn=dsn, stdin=event_json())
    assert ok.returncode == 0, ok.stderr
    assert "appended 1 event(s) to run-cli (versions 1..1)" in ok.stdout
    two = "[" + event_json() + "," + event_json() + "]"
    assert props("events", "append", "--expected-version", "1", dsn=dsn,
                 stdin=two).returncode == 0
    tail = props("events", "tail", "--from", "start", "--no-follow", "--json", dsn=dsn)
    assert tail.returncode == 0, tail.stderr
    lines = [orjson.loads(line) for line in tail.stdout.splitlines()]
    assert [d["version"] for d in lines] == [1, 2, 3]
    assert lines[0]["type"] == "phase.completed" and lines[0]["metadata"] == {"actor": "cli"}
    human = props("events", "tail", "--from", "start", "--no-follow", dsn=dsn)
    assert "run-cli@3 phase.completed" in human.stdout
    # Without --from, --no-follow prints the log so far (not nothing).
    assert props("events", "tail", "--no-follow", dsn=dsn).stdout == human.stdout


@pytest.mark.parametrize(("stdin", "code", "message"), [
    ("{not json", 65, "not valid JSON"),
    (event_json(type="no.such"), 65, "unknown event type 'no.such'; known types:"),
    (event_json(data={"phase": "x", "duration_seconds": -1}), 65,
     "run_id: Field required; duration_seconds: Input should be greater than or equal to 0"),
    (event_json(stream="BAD"), 65, "is not <category>-<id>"),
    (event_json(extra=1), 65, "unknown keys ['extra']"),
])
def test_bad_input_is_refused_and_nothing_is_written(
    dsn: str, stdin: str, code: int, message: str
) -> None:
    out = props("events", "append", dsn=dsn, stdin=stdin)
    assert out.returncode == code, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr
    tail = props("events", "tail", "--from", "start", "--no-follow", dsn=dsn)
    assert tail.stdout == ""


def test_version_conflict_exit_code(dsn: str) -> None:
    props("events", "append", dsn=dsn, stdin=event_json())
    out = props("events", "append", "--expected-version", "0", dsn=dsn, stdin=event_json())
    assert out.returncode == 75
    assert "'run-cli' is at version 1, the append expected no stream" in out.stderr


def test_dead_database_is_a_clear_error() -> None:
    out = props("db", "status", dsn="postgresql://props:hunter2@127.0.0.1:1/props")
    assert out.returncode == 69
    assert "cannot reach PostgreSQL" in out.stderr and "Traceback" not in out.stderr
    assert "hunter2" not in out.stderr


def test_missing_input_file(dsn: str, tmp_path: Path) -> None:
    out = props("events", "append", str(tmp_path / "nope.json"), dsn=dsn)
    assert out.returncode == 1 and "cannot read" in out.stderr


def test_demo_from_a_fresh_embedded_data_directory(tmp_path: Path) -> None:
    """The newcomer's command: no PROPS_DSN, a new data directory, then the same again."""
    env = {k: v for k, v in os.environ.items() if k != "PROPS_DSN"}
    env["PROPS_HOME"] = str(tmp_path / "home")
    try:
        out = subprocess.run([*CLI, "demo"], capture_output=True, text=True, env=env,
                             timeout=1800, check=False)
        assert out.returncode == 0, out.stderr
        assert "3 new version(s) recorded" in out.stdout
        # Two variants of the reference critic and the ruff baseline, twice on each snapshot.
        assert "as critic baseline-ruff (new)" in out.stdout
        flat = " ".join(out.stdout.split())  # as printed, whatever the terminal's width
        assert "evaluation demo v1 (demo.toml): 18 cases, 3 critics x 3 snapshots x 2 " \
               "epochs (recorded)" in flat
        assert "18 run(s) finished and graded under tiered@2, none pending" in out.stdout
        assert "baseline-ruff" in flat  # in the report, beside the variants
        assert "only the runs of evaluation demo" in flat
        assert ("critic runs: 18, each in one state under tiered@2: scored 18; none "
                "excluded, missing evidence, not completed, no issues, ungraded, unscorable "
                "or parked") in flat
        assert "18 run(s) selected = " in out.stdout and "+ 0 unscorable" in out.stdout
        assert "chain and manifest intact" in out.stdout
        first = int(out.stdout.split("export: ")[1].split(" events")[0])
        again = subprocess.run([*CLI, "demo"], capture_output=True, text=True, env=env,
                               timeout=1800, check=False)
        assert again.returncode == 0, again.stderr
        flat = " ".join(again.stdout.split())
        # What it printed instead says why (a runtime that changed is a new version).
        assert "evaluation demo v1 (demo.toml): 18 cases" in flat, again.stdout
        assert "epochs (resumed)" in flat and "(reused)" in flat, again.stdout
        assert f"export: {first} events" in again.stdout, again.stdout  # duplicates nothing
        # The same report as the first time: the demo's scorer only, though the first demo
        # re-scored every run under overlap@2 (they were in the second report's rows).
        assert _demo_report(again.stdout) == _demo_report(out.stdout)
        assert "overlap@2" not in _demo_report(out.stdout)
    finally:
        subprocess.run([*CLI, "db", "stop"], env=env, capture_output=True, timeout=60,
                       check=False)


def _demo_report(stdout: str) -> str:
    """The evaluation's report `props demo` prints, between the reactors' line and the
    re-score, its point in the log (TX:POSITION, later the second time) left out."""
    report = stdout.split("none pending", 1)[1].split("re-scoring every run", 1)[0]
    return re.sub(r"\b\d+:\d+\b", "TX:POSITION", report)


async def test_demo_leaves_a_typed_readable_log(empty_dsn: str, tmp_path: Path) -> None:
    out = props("demo", dsn=empty_dsn, env={"PROPS_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr

    async with open_store(empty_dsn) as store:
        got = [r async for batch in store.iter_all() for r in batch]
        run = [r for r in got if r.category == "run"]
        for stream in {r.stream_id for r in run}:
            types = [r.type_name for r in run if r.stream_id == stream]
            assert types[:4] == ["run.requested", "run.claimed", "run.started", "container.started"]
            assert types[-2:] == ["container.exited", "run.finished"]
        prompt = next(r.event for r in run if r.type_name == "prompt.composed")
        assert await store.get_blob(prompt.prompt_sha256)  # type: ignore[union-attr]
        finished = [r.event for r in run if isinstance(r.event, catalog.RunFinished)]
        assert len(finished) == 18 and {f.status for f in finished} == {"completed"}


def test_tail_follows_the_log_live(dsn: str) -> None:
    env = {**os.environ, "PROPS_DSN": dsn}
    tail = subprocess.Popen([*CLI, "events", "tail", "--json"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert tail.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(tail.stdout, selectors.EVENT_READ)
        lines: list[str] = []
        for attempt in range(40):  # the tail needs a moment to start; append until it shows
            assert props("events", "append", dsn=dsn,
                         stdin=event_json(stream=f"run-live{attempt}")).returncode == 0
            if sel.select(timeout=0.5):
                lines.append(tail.stdout.readline())
                break
        assert lines, "tail printed nothing"
        assert orjson.loads(lines[0])["stream"].startswith("run-live")
    finally:
        tail.terminate()
        tail.communicate(timeout=10)  # also closes the pipes


def test_specimens_commands(dsn: str, tmp_path: Path) -> None:
    samples = props("specimens", "samples", dsn=dsn).stdout.strip()
    ok = props("specimens", "validate", samples, dsn=dsn)
    assert ok.returncode == 0 and "csvtool/2025-09-03-00: ok" in ok.stdout
    synced = props("specimens", "sync", samples, dsn=dsn)
    assert synced.returncode == 0, synced.stderr
    assert "3 event(s) appended" in synced.stdout
    assert "0 event(s) appended" in props("specimens", "sync", samples, dsn=dsn).stdout
    listed = orjson.loads(props("specimens", "list", "--json", dsn=dsn).stdout)
    assert {r["slug"] for r in listed} >= {"csvtool/2025-09-03-00", "notes-api/2025-10-14-00"}
    shown = props("specimens", "show", "notes-api/2025-10-14-00", dsn=dsn)
    assert "search-sql-injection" in shown.stdout and "notes/db.py:76-80" in shown.stdout
    missing = props("specimens", "show", "nope/2025-01-01-00", dsn=dsn)
    assert missing.returncode == 66 and "props specimens list" in missing.stderr


def test_invalid_specimens_write_nothing(dsn: str, tmp_path: Path) -> None:
    bad = tmp_path / "proj" / "2025-01-01-00"
    (bad / "code").mkdir(parents=True)
    (bad / "code" / "a.py").write_text("x = 1\n")
    (bad / "ground_truth.toml").write_text(
        '[[tp]]\nid = "t"\nrationale = "r"\noccurrences = [ { "a.py" = [[1, 9]] } ]\n')
    for command in ("validate", "sync"):
        out = props("specimens", command, str(tmp_path), dsn=dsn)
        assert out.returncode == 65
        assert f"{bad / 'ground_truth.toml'}:4: tp 't', occurrence 1: range [1, 9]" in out.stderr
        assert "nothing was recorded" in out.stderr
    assert props("events", "tail", "--from", "start", "--no-follow", dsn=dsn).stdout == ""


def test_projections_and_report(dsn: str) -> None:
    import anyio

    from props.tools.checks.workload import Workload

    async def load() -> None:
        async with open_store(dsn) as store:
            w = Workload(2)
            await w.setup(store)
            await w.append_runs(store, 40)

    anyio.run(load)
    not_built = props("report", dsn=dsn)
    assert not_built.returncode == 65 and "props projections rebuild --all" in not_built.stderr
    built = props("projections", "rebuild", "--all", dsn=dsn)
    assert built.returncode == 0
    assert "rebuilt ground_truth, runs, issues, usage, grading" in built.stdout
    status = props("projections", "status", dsn=dsn)
    assert "runs" in status.stdout and "fence is clear" in status.stdout
    report = orjson.loads(props("report", "--format", "json", dsn=dsn).stdout)
    assert {r["scorer"] for r in report["scores"]} == {"overlap@1"}
    assert report["evidence"]["critic_runs"] == 40
    assert all(0 <= r["located_recall"] <= 1 for r in report["scores"]
               if r["located_recall"] is not None)
    only = orjson.loads(props("report", "--format", "json", "--scorer", "overlap@2",
                              dsn=dsn).stdout)
    assert only["scores"] == []  # nothing graded by overlap@2 yet
    csv_out = props("report", "--format", "csv", dsn=dsn).stdout.splitlines()
    assert csv_out[0].startswith("model,definition,digest,scorer,runs,located_recall")
    # Every field the JSON report has is a CSV column (a new field once failed the CSV whole).
    assert set(report["scores"][0]) <= set(csv_out[0].split(","))
    table = props("report", dsn=dsn).stdout
    assert "none excluded, missing evidence" in " ".join(table.split())
    bad = props("projections", "rebuild", "nope", dsn=dsn)
    assert bad.returncode == 1 and "unknown projection(s) nope" in bad.stderr


def test_analyst_dsn(dsn: str) -> None:
    out = props("db", "dsn", "--analyst", dsn=dsn).stdout.strip()
    assert out.startswith("postgresql://props_analyst@") and out.split("/")[-1] == \
        dsn.split("/")[-1]


def test_rescore_and_compare_commands(dsn: str) -> None:
    import anyio

    from props.tools.checks.workload import Workload
    from tests.conftest import rebuilt

    async def load() -> None:
        async with open_store(dsn) as store:
            w = Workload(6)
            await w.setup(store)
            await w.append_runs(store, 30)
            await rebuilt(store)  # (once the fence is clear: the rescore reads projections)

    anyio.run(load)
    assert "select runs" in props("rescore", "--scorer", "overlap@2", dsn=dsn).stderr
    dry = props("rescore", "--scorer", "overlap@2", "--all", "--dry-run", dsn=dsn)
    assert dry.returncode == 0 and "30 run(s) selected; 30 graded" in dry.stdout
    done = props("rescore", "--scorer", "overlap@2", "--all", dsn=dsn)
    assert done.returncode == 0 and "against the ground truth at-run" in done.stdout
    assert ", appended 0" in props("rescore", "--scorer", "overlap@2", "--all",
                                   dsn=dsn).stdout
    # No runner serves here: the re-score folds its own grades before it ends, so compare
    # reads them (it read "not graded by overlap@2" for every run until a rebuild).
    out = props("compare", "overlap@1", "overlap@2", "--all", "--format", "json", dsn=dsn)
    assert out.returncode == 0, out.stderr
    c = orjson.loads(out.stdout)
    assert "not graded by overlap@2" not in str(c["unscorable"])
    assert c["complete"] and c["selected"] == 30
    assert c["unchanged"] + len(c["changed"]) + len(c["unscorable"]) == 30
    table = props("compare", "overlap@1", "overlap@2", "--all", dsn=dsn).stdout
    assert "30 run(s) selected = " in table
    listed = props("scorers", "list", dsn=dsn).stdout
    assert "overlap@1" in listed and "active" in listed
    # Activation is gated on a verification of overlap@2's exact bytes (issue 53).
    gated = props("scorers", "activate", "overlap@2", dsn=dsn)
    assert gated.returncode == 77 and "props scorers verify overlap@2" in gated.stderr
    verified = props("scorers", "verify", "overlap@2", dsn=dsn)
    assert verified.returncode == 0 and "policy: passes" in verified.stdout, verified.stdout
    assert props("scorers", "activate", "overlap@2", dsn=dsn).returncode == 0
    unknown = props("compare", "nope@1", "overlap@2", "--all", dsn=dsn)
    assert unknown.returncode == 66 and "tiered@2" in unknown.stderr  # names the known ones


def test_export_verify_import_commands(dsn: str, empty_dsn: str, tmp_path: Path) -> None:
    assert props("demo", dsn=dsn, env={"PROPS_HOME": str(tmp_path)}).returncode == 0
    out = tmp_path / "range.jsonl.zst"
    exported = props("export", "-o", str(out), "--exclude-category", "snapshot", dsn=dsn)
    assert exported.returncode == 0 and "exported" in exported.stdout
    assert "intact" in props("verify", str(out), dsn=dsn).stdout
    whole = tmp_path / "all.jsonl.zst"
    assert props("export", "-o", str(whole), dsn=dsn).returncode == 0
    assert props("db", "migrate", dsn=empty_dsn).returncode == 0
    # A whole log carries its consumers' records: history here, never acting on this
    # database (issue 55: it was refused, and with --inert a stream lost a version).
    first = props("import", str(whole), dsn=empty_dsn)
    assert first.returncode == 0 and "0 already present" in first.stdout, first.stdout
    again = props("import", str(whole), dsn=empty_dsn)
    assert "imported 0," in again.stdout
    broken = tmp_path / "broken.jsonl.zst"
    broken.write_bytes(whole.read_bytes()[:-40])
    refused = props("import", str(broken), dsn=empty_dsn)
    assert refused.returncode == 65 and "nothing was written" in refused.stderr


def test_definitions_runs_and_reactors_commands(dsn: str, tmp_path: Path) -> None:
    home = {"PROPS_HOME": str(tmp_path), "COLUMNS": "250"}  # rich wraps at the width

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return props(*args, dsn=dsn, env=home)

    assert cli("specimens", "sync", str(_samples())).returncode == 0
    pushed = cli("definitions", "reference")
    assert pushed.returncode == 0 and "critic reference:local (local) = sha256:" in pushed.stdout
    digest = pushed.stdout.split("= ")[1].split()[0]
    assert "(already recorded)" in cli("definitions", "reference").stdout
    assert "reference" in cli("definitions", "list").stdout
    missing = cli("runs", "request", "--definition", "nobody", "--snapshot",
                  "csvtool/2025-09-03-00", "--model", "m")
    assert missing.returncode == 66 and "push one first" in missing.stderr
    requested = cli("runs", "request", "--definition", "reference@local", "--snapshot",
                    "csvtool/2025-09-03-00", "--model", "m", "--count", "2")
    assert requested.returncode == 0, requested.stderr
    ids = [line.split()[-1] for line in requested.stdout.splitlines()
           if line.startswith("requested run ")]
    assert len(ids) == 2 and "no launcher is running" in requested.stdout
    run_id = ids[-1]
    shown = cli("runs", "show", run_id).stdout
    assert "run.requested" in shown and digest[:19] in shown  # resolved at request time
    cancelled = cli("runs", "cancel", run_id)
    assert cancelled.returncode == 0 and "cancel requested" in cancelled.stdout
    status = cli("reactors", "status")
    assert status.returncode == 0 and "2 queued, 0 running, 0 finished" in status.stdout
    assert cli("runs", "show", str(uuid.uuid4())).returncode == 66  # not in the log
    # No --model: the definition's name is the model (a baseline's tool is its model).
    unnamed = cli("runs", "request", "--definition", "reference@local", "--snapshot",
                  "csvtool/2025-09-03-00")
    assert unnamed.returncode == 0, unnamed.stderr
    new_id = unnamed.stdout.split("requested run ")[1].split()[0]
    def model_of(run: str) -> str:
        timeline = orjson.loads(cli("runs", "show", run, "--json").stdout)["events"]
        return str(timeline[0]["data"]["model"])  # (its run.requested)

    assert model_of(new_id) == "reference" and model_of(run_id) == "m"


def _samples() -> Path:
    from props.tools.bundled import samples

    return samples.samples_dir()
