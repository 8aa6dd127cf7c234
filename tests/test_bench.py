"""`props bench log` runs, measures both sides, and reports honestly.

The figures themselves are not asserted (these machines are noisy; targets live in the
benchmark, not in timed tests): this checks that the suite runs and that its verdicts mean
what they say.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import orjson
import pytest

from props.tools.checks.benchmarks.report import Check, Report
from tests.conftest import once_per_ci

CHECKS = {"append_single_vs_insert": (">=", 0.8), "append_batch100_vs_insert": (">=", 1.0),
          "read_all_vs_typed_floor": (">=", 0.9), "wake_p99_vs_notify": ("<=", 2.0)}


# Checks the quick suites never run (they would bring up a two-node swarm): NORUN there.
QUICK_NORUN = {"swarm_vs_docker_run", "swarm_two_nodes_vs_one"}


def run_bench(suite: str, server_dsn: str) -> tuple[dict[str, Any], dict[str, Any], int]:
    """Run `props bench SUITE --quick --json`; return (checks by name, summary, exit code)."""
    env = {**os.environ, "PROPS_DSN": server_dsn}
    out = subprocess.run([sys.executable, "-m", "props.tools.cli", "bench", suite, "--quick",
                          "--json"], capture_output=True, text=True, env=env, timeout=600,
                         check=False)
    assert out.returncode in (0, 1), out.stderr  # 1: a check failed, which it may on noise
    assert out.stdout.strip(), f"no summary line; stderr:\n{out.stderr}"
    summary = orjson.loads(out.stdout.strip().splitlines()[-1])
    assert summary["suite"] == suite and summary["quick"] is True
    checks = {c["name"]: c for c in summary["checks"]}
    assert all(isinstance(c["value"], float) and c["value"] > 0 for c in checks.values()
               if c["name"] not in QUICK_NORUN)
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
