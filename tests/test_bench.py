"""`props bench log` runs, measures both sides, and reports honestly.

The figures themselves are not asserted (these machines are noisy; targets live in the
benchmark, not in timed tests): this checks that the suite runs and that its verdicts mean
what they say.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from props.core.log.store import EventStore
from props.tools.checks.benchmarks import log_suite, peers
from props.tools.checks.benchmarks.report import Check, Held, Report, Rounds
from tests.conftest import once_per_ci

CHECKS = {"append_single_vs_insert": (">=", 0.8), "append_batch100_vs_insert": (">=", 1.0),
          "read_all_vs_typed_floor": (">=", 0.9), "wake_p99_vs_notify": ("<=", 2.0)}


# Checks the quick suites never run (they would bring up a two-node swarm): NORUN there.
QUICK_NORUN = {"swarm_vs_docker_run", "swarm_two_nodes_vs_one"}


def run_bench(suite: str, server_dsn: str, *mode: str, norun: frozenset[str] = frozenset(),
              ) -> tuple[dict[str, Any], dict[str, Any], int]:
    """Run `props bench SUITE --quick --json [MODE...]`; return (checks by name, summary, exit
    code). Every check but those in QUICK_NORUN and `norun` must have run."""
    env = {**os.environ, "PROPS_DSN": server_dsn}
    out = subprocess.run([sys.executable, "-m", "props.tools.cli", "bench", suite, "--quick",
                          "--json", *mode], capture_output=True, text=True, env=env,
                         timeout=600, check=False)
    assert out.returncode in (0, 1), out.stderr  # 1: a check failed, which it may on noise
    assert out.stdout.strip(), f"no summary line; stderr:\n{out.stderr}"
    summary = orjson.loads(out.stdout.strip().splitlines()[-1])
    assert summary["suite"] == suite and summary["quick"] is True
    checks = {c["name"]: c for c in summary["checks"]}
    assert all(isinstance(c["value"], float) and c["value"] > 0 for c in checks.values()
               if c["name"] not in QUICK_NORUN | norun)
    verdicts_pass = all(c["verdict"] == "PASS" for c in checks.values())
    assert out.returncode == (0 if verdicts_pass else 1)
    return checks, summary, out.returncode


def test_verdicts_can_fail_and_say_norun() -> None:
    assert Check("a", 1.2, ">=", 1.0).verdict == "PASS"
    assert Check("a", 0.9, ">=", 1.0).verdict == "FAIL"
    assert Check("a", 2.5, "<=", 2.0).verdict == "FAIL"
    assert Check("a", None, ">=", 1.0).verdict == "NORUN"
    report = Report("x", quick=True, checks=[Check("a", None, ">=", 1.0)])
    assert not report.passed  # a check that did not run is never a pass
    line = orjson.loads(report.json_line())
    assert line["checks"][0] == {"name": "a", "value": None, "op": ">=", "target": 1.0,
                                 "unit": "ratio", "verdict": "NORUN"}


def test_rounds_say_held_only_when_every_round_passed_with_headroom() -> None:
    """A check over rounds is HELD when every round passed by 10% of its target (>= 0.8 asks
    0.88; <= 1.5 asks 1.35), PASS when every round passed but one not by 10%, FAIL when one
    round failed however well the others did (even beside a round that did not run it),
    NORUN when a round did not run it and none failed."""
    assert Held("a", ">=", 0.8, [0.88, 0.95, 1.2]).verdict == "HELD"
    assert Held("a", ">=", 0.8, [0.88, 0.879, 1.2]).verdict == "PASS"  # one round short
    assert Held("a", ">=", 0.8, [2.0, 0.79, 2.0]).verdict == "FAIL"  # one round fails
    assert Held("b", "<=", 1.5, [1.35, 1.0]).verdict == "HELD"
    assert Held("b", "<=", 1.5, [1.351, 1.0]).verdict == "PASS"
    assert Held("b", "<=", 1.1, [0.99]).verdict == "HELD"
    assert Held("b", "<=", 1.5, [1.51]).verdict == "FAIL"
    assert Held("a", ">=", 0.8, [2.0, None]).verdict == "NORUN"  # never read as a pass
    assert Held("a", ">=", 0.8, [2.0, 0.5, None]).verdict == "FAIL"  # the failure first
    rounds = Rounds("x", quick=True, loads=[1.0, 2.0], reports=[
        Report("x", True, [Check("a", 1.0, ">=", 0.8), Check("b", 1.0, "<=", 1.5)]),
        Report("x", True, [Check("a", 0.7, ">=", 0.8)])])  # b did not run in round 2
    assert not rounds.passed
    line = orjson.loads(rounds.json_line())
    assert [(c["name"], c["values"], c["verdict"]) for c in line["checks"]] == [
        ("a", [1.0, 0.7], "FAIL"), ("b", [1.0, None], "NORUN")]
    assert line["rounds"] == 2 and line["loads"] == [1.0, 2.0] and len(line["reports"]) == 2
    assert line["checks"][0]["headroom_target"] == 0.88
    # A check one round's report left out is not a pass either, whatever that round said.
    left_out = Rounds("x", quick=True, reports=[
        Report("x", True, [Check("a", 1.0, ">=", 0.8)]), Report("x", True, [])])
    assert left_out.reports[1].passed and not left_out.passed
    # Judged as shown: 1.3504 is printed 1.350, and so it is judged.
    assert Rounds("x", True, [Report("x", True, [Check("b", 1.3504, "<=", 1.5)])]
                  ).held()[0].verdict == "HELD"
    # ... and so is a single round's check: what is printed is what passed or failed.
    assert Check("c", 0.4996, ">=", 0.5).verdict == "PASS"  # printed 0.500
    assert Check("c", 0.4994, ">=", 0.5).verdict == "FAIL"  # printed 0.499
    assert Check("d", 1.5004, "<=", 1.5).verdict == "PASS"
    assert Check("d", 1.5006, "<=", 1.5).verdict == "FAIL"


@pytest.mark.bench
def test_rounds_run_the_suite_again_and_summarise_every_round(server_dsn: str) -> None:
    """`props bench cli --quick --rounds 2 --json`: two rounds really ran (each with its own
    figures), the summary's values are each round's, and the exit code is every round's."""
    env = {**os.environ, "PROPS_DSN": server_dsn}
    out = subprocess.run([sys.executable, "-m", "props.tools.cli", "bench", "cli", "--quick",
                          "--rounds", "2", "--json"], capture_output=True, text=True, env=env,
                         timeout=600, check=False)
    assert out.returncode in (0, 1), out.stderr
    line = orjson.loads(out.stdout.strip().splitlines()[-1])
    assert line["suite"] == "cli" and line["rounds"] == 2 and len(line["loads"]) == 2
    reports = line["reports"]
    assert len(reports) == 2 and reports[0]["figures"] != reports[1]["figures"]
    for check in line["checks"]:
        assert check["values"] == [next(c["value"] for c in r["checks"]
                                        if c["name"] == check["name"]) for r in reports]
        assert check["verdict"] in ("HELD", "PASS", "FAIL")
    every_round_passed = all(c["verdict"] == "PASS" for r in reports for c in r["checks"])
    assert out.returncode == (0 if every_round_passed else 1)
    assert "round 2 of 2" in out.stderr and "with headroom" in out.stderr


@pytest.mark.bench
def test_quick_log_bench_prints_its_checks_as_the_last_line(server_dsn: str) -> None:
    got, summary, _code = run_bench("log", server_dsn)
    assert set(got) == set(CHECKS)
    for name, (op, target) in CHECKS.items():
        assert (got[name]["op"], got[name]["target"]) == (op, target)
    figures = summary["figures"]
    assert figures["append_single"]["raw_insert_per_s"] > 0
    assert figures["append_batch100"]["raw_copy_per_s"] > 0
    assert figures["wake"]["samples"] >= 100
    read = figures["read_all"]  # the raw comparison is reported beside the floor's check
    assert read["read_all_vs_raw"] > 0 and read["typed_floor"] in ("validate_json",
                                                                    "orjson+validate")


@pytest.mark.bench
def test_quick_projections_bench_reports_its_three_checks(server_dsn: str) -> None:
    got, summary, _code = run_bench("projections", server_dsn)
    assert set(got) == {"rebuild_vs_raw_read", "rebuild_events_per_s", "lag_p99_ms"}
    assert summary["figures"]["events"] > 40_000
    assert summary["figures"]["lag"]["events"] > 1000  # the load really ran


@pytest.mark.bench
def test_quick_rescore_bench_reports_its_five_checks(server_dsn: str) -> None:
    got, summary, _code = run_bench("rescore", server_dsn)
    assert set(got) == {"rescore_issues_per_s", "rescore_vs_raw_read", "report_seconds",
                        "report_vs_raw_aggregate", "chance_share_of_rescore"}
    assert summary["figures"]["grades"] == summary["figures"]["issues"] == 50_000
    # The report covered the completed runs (only what completed counts: the workload fails
    # some on purpose; the suite itself holds the report to the raw aggregate, run for run)
    # and every grade of the scorer it was timed on.
    assert summary["figures"]["runs"] == 500
    assert 0 < summary["figures"]["report_runs"] < 500
    assert summary["figures"]["report_edges"] == 50_000


@pytest.mark.bench
def test_quick_export_bench_reports_its_three_checks(server_dsn: str) -> None:
    got, summary, _code = run_bench("export", server_dsn)
    assert set(got) == {"export_time_vs_pgdump", "size_vs_pgdump", "import_vs_copy"}
    assert summary["figures"]["pg_dump_zstd19_bytes"] > 0  # pg_dump really ran


@pytest.mark.bench
@pytest.mark.docker
def test_quick_reactors_bench_reports_its_two_checks(server_dsn: str) -> None:
    import anyio

    from props.reactors.runtimes import docker_runtime
    from tests.conftest import docker_required

    if not anyio.run(docker_runtime.reachable) and not docker_required():
        pytest.skip("no Docker engine: overhead_vs_docker_run would say NORUN")
    got, summary, _code = run_bench("reactors", server_dsn)
    assert set(got) == {"overhead_vs_docker_run", "grade_issues_per_s", "two_launchers_vs_one",
                        *QUICK_NORUN}
    assert {got[n]["verdict"] for n in QUICK_NORUN} == {"NORUN"}  # never a made-up PASS
    assert summary["figures"]["one_launcher_s"] > summary["figures"]["two_launchers_s"] > 0
    figures = summary["figures"]
    assert figures["grades_appended"] == figures["issues"] == 10_000  # every issue graded
    assert figures["docker_bare_s"] > 0 and figures["local_bare_s"] > 0  # both sides ran


@pytest.mark.bench
def test_quick_cli_bench_reports_its_two_checks(server_dsn: str) -> None:
    got, summary, _code = run_bench("cli", server_dsn)
    assert set(got) == {"version_vs_imports", "startup_vs_imports"}
    assert summary["figures"]["rounds"] == 5 and summary["figures"]["imports_seconds"] > 0


@pytest.mark.bench
@once_per_ci
def test_quick_viewer_bench_reports_its_three_checks(server_dsn: str) -> None:
    got, summary, _code = run_bench("viewer", server_dsn)
    assert set(got) == {"runs_page_ms", "run_page_ms", "runs_page_vs_raw"}
    figures = summary["figures"]
    assert figures["runs"] == 100_000 and figures["big_run_issues"] == 2_000
    assert figures["runs_raw_p50_ms"] > 0 and figures["run_raw_p50_ms"] > 0  # both sides ran
    assert all(c["verdict"] in ("PASS", "FAIL") for c in got.values())  # none NORUN


@pytest.mark.bench
@pytest.mark.docker
@once_per_ci
def test_quick_eval_bench_runs_both_sides(server_dsn: str) -> None:
    import anyio

    from props.reactors.runtimes import docker_runtime
    from tests.conftest import docker_required

    if not anyio.run(docker_runtime.reachable) and not docker_required():
        pytest.skip("no Docker engine: eval_vs_docker_run would say NORUN")
    got, summary, _code = run_bench("eval", server_dsn)
    assert set(got) == {"eval_vs_docker_run"}
    figures = summary["figures"]
    assert figures["cases"] == 60 and figures["concurrency"] == 8  # every case scored
    assert figures["docker_run_loop_s"] > 0 and figures["eval_s"] > 0  # both sides ran


PEER_CHECKS = {f"{w}_vs_{p}" for w in log_suite.PEER_WORKLOADS for p in log_suite.PEERS}


@pytest.mark.bench
@once_per_ci
def test_quick_log_bench_with_peers_puts_each_peer_beside_props(server_dsn: str) -> None:
    """`--peers` runs both peers (installed by the dev extra) in the same run: a ratio of
    props to each, for every workload, and the peer's own rate beside it."""
    got, summary, _code = run_bench("log", server_dsn, "--peers")
    assert set(got) == set(CHECKS) | PEER_CHECKS
    assert all(got[name]["verdict"] in ("PASS", "FAIL") for name in PEER_CHECKS)  # all ran
    figures = summary["figures"]["peers"]
    for peer in log_suite.PEERS:
        assert isinstance(figures[peer]["version"], str)
        for workload in log_suite.PEER_WORKLOADS:
            rate, ratio = figures[peer][f"{workload}_per_s"], figures[peer][f"props_vs_{workload}"]
            assert isinstance(rate, int) and rate > 0 and isinstance(ratio, float) and ratio > 0
            assert figures["props"][f"{workload}_per_s"] > 0


async def test_a_peer_that_cannot_be_installed_says_norun_with_its_reason(
        store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither peer can be installed (eventsourcing not importable, Message DB's SQL absent):
    every peer check says NORUN with the peer's reason, and the report does not pass. On a
    suite that let an unavailable peer out of the checks (or gave it a value), the report
    would pass on props' own checks alone."""
    monkeypatch.setitem(sys.modules, "eventsourcing.postgres", None)  # import fails
    monkeypatch.setattr(peers, "MESSAGE_DB", tmp_path)
    report = Report("log", quick=True)
    await log_suite._side_by_side(store, log_suite.Rows(), {"single": 10, "batches": 1,
                                                            "reads": 1}, report)
    assert {c.name for c in report.checks} == PEER_CHECKS
    assert {c.verdict for c in report.checks} == {"NORUN"} and not report.passed
    reasons = {c.name: c.reason or "" for c in report.checks}
    assert "pip install 'props[bench]'" in reasons["append_single_vs_eventsourcing"]
    assert "Message DB's SQL is missing" in reasons["read_all_vs_message_db"]
    line = orjson.loads(report.json_line())
    assert all(c["value"] is None and c["reason"] for c in line["checks"])
    assert set(report.figures["peers"]) == {"eventsourcing", "message_db"}


SCALE_PHASES = ("rebuild", "rescore", "report")


@pytest.mark.bench
@once_per_ci
def test_scale_mode_at_its_smallest_size_measures_every_phase(server_dsn: str) -> None:
    """`--scale` at 10^4 alone: every phase's cost per event, growth and memory peaks are
    numbers, and the growth checks say NORUN (one size compares with nothing), never PASS."""
    checks = frozenset(f"{p}_cost_growth" for p in SCALE_PHASES)
    got, summary, code = run_bench("projections", server_dsn, "--scale", "--scale-upto",
                                   "10000", norun=checks)
    assert set(got) == checks and code == 1
    assert all(c["verdict"] == "NORUN" and "nothing to compare" in c["reason"]
               for c in got.values())
    (size,) = summary["figures"]["sizes"]
    assert size["size"] == 10_000 and size["events"] >= 10_000
    numbers = ["raw_read_us_per_event", "raw_read_growth_step", "runner_peak_mib", "grades",
               "report_runs"]
    for p in SCALE_PHASES:
        numbers += [f"{p}_us_per_event", f"{p}_growth", f"{p}_growth_step", f"{p}_process_peak_mib",
                    f"{p}_server_private_peak_mib"]
    for key in numbers:  # the embedded server is this machine's: its memory is read too
        assert isinstance(size[key], int | float) and size[key] > 0, key


def test_bench_modes_belong_to_their_suite(server_dsn: str) -> None:
    """--peers and --scale are refused (exit 2, one line) on a suite without that mode, and
    --rounds outside 1..20, before any database is made."""
    env = {**os.environ, "PROPS_DSN": server_dsn}
    for args in (["rescore", "--peers"], ["log", "--scale"], ["projections", "--scale-upto",
                                                               "10000"],
                 ["cli", "--rounds", "0"], ["cli", "--rounds", "21"]):
        out = subprocess.run([sys.executable, "-m", "props.tools.cli", "bench", *args],
                             capture_output=True, text=True, env=env, timeout=120,
                             check=False)
        assert out.returncode == 2 and out.stdout == "", (args, out)
        assert len(out.stderr.strip().splitlines()) == 1 and "props bench" in out.stderr


@pytest.mark.bench
def test_a_bench_stopped_by_sigterm_drops_its_scratch_database(server_dsn: str) -> None:
    """`timeout 60 props bench ...` sends SIGTERM: the command is cancelled as by Ctrl-C, so
    its scratch database is dropped, and it exits 143 with one line. (SIGTERM's default
    ended the process at once and left the database, with its events, on the server.)"""
    import psycopg

    def scratch() -> set[str]:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            return {r[0] for r in conn.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE 'props\\_bench\\_%'")}

    before = scratch()
    proc = subprocess.Popen([sys.executable, "-m", "props.tools.cli", "bench", "cli",
                             "--quick", "--rounds", "3"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PROPS_DSN": server_dsn})
    try:
        deadline = time.monotonic() + 120
        while not (made := scratch() - before):  # its first round's database
            assert proc.poll() is None and time.monotonic() < deadline, "no scratch database"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143
    assert err.decode().strip().splitlines()[-1] == "props: stopped by SIGTERM"
    assert not made & scratch()  # (another bench on the same server may have its own)
