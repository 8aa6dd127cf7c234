"""A critic that tries everything an agent must not be able to do, then reports malformed data.

`python -m props.tools.checks.hostile_critic`, run by the launcher like any critic (a local process
or a Docker container), beside honest runs in the tests and in `props chaos`. Every attempt
that works is a breach; the agent prints one line `HOSTILE {"breaches": [...], "tried": N}`
to its logs (REPORT_PREFIX). Then it reports an event the catalog refuses, so its run must
end `failed` with a closed failure fact while the honest runs go on.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

REPORT_PREFIX = "HOSTILE "
# The launcher's namespace of its own event ids (props.reactors.launcher.launcher), as an attacker
# would copy it from the source.
LAUNCHER_NAMESPACE = uuid.UUID("e3a1c7d2-64b5-4f0a-8a43-0c3e2b9d7f11")
GROUND_TRUTH_AND_LOG = [
    "props.events", "props.blobs", "props.agent_bindings", "props.checkpoints",
    "props.api_tokens", "projections.ground_truth_tps", "projections.ground_truth_fps",
    "projections.true_positives", "projections.agent_runs", "projections.reported_issues"]
FORBIDDEN = [
    "SELECT lo_create(0)", "SELECT pg_advisory_lock(1)",
    "SELECT pg_try_advisory_lock(hashtext('x'))", "CREATE TEMP TABLE t (x int)",
    "SELECT pg_notify('props_events', 'x')",
    "UPDATE props.agent_bindings SET max_events = 1000000",
    "SELECT pg_read_file('/etc/passwd')", "SELECT pg_current_xact_id()",
    "SELECT txid_current()", "SET temp_file_limit = -1"]
# What the launcher declares for a run; any other PROPS_* or PG* variable (or DATABASE_URL) in
# its environment would be the service's, handed over: a breach whatever it holds.
DECLARED = {"PROPS_TASK", "PROPS_AGENT_DSN", "PROPS_EXAMPLE_DIR", "PROPS_GRADING_DIR"}


class Attempts:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.breaches: list[str] = []
        self.tried = 0

    def attempt(self, name: str, fn: Callable[[], object]) -> None:
        """Try `fn`; it working is a breach."""
        self.tried += 1
        try:
            fn()
        except Exception:
            return
        self.breaches.append(name)

    def as_role(self, role: str, password: str) -> str:
        scheme, _, rest = self.dsn.partition("://")
        return f"{scheme}://{role}:{password}@{rest.partition('@')[2]}"

    def log_in(self, role: str, password: str) -> None:
        psycopg.connect(self.as_role(role, password), connect_timeout=5).close()


def _session(dsn: str, *, autocommit: bool = True) -> psycopg.Connection[Any]:
    """The run's one session (its role allows one): the previous one may still be ending on
    the server, so a refusal is tried again for a few seconds, as the SDK does."""
    import tenacity

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(dsn, autocommit=autocommit)

    again = tenacity.Retrying(reraise=True, stop=tenacity.stop_after_delay(10),
                              wait=tenacity.wait_fixed(0.2),
                              retry=tenacity.retry_if_exception_type(psycopg.OperationalError))
    return again(connect)


def _fetch(conn: psycopg.Connection[Any], statement: sql.SQL | sql.Composed) -> object:
    return conn.execute(statement).fetchall()


def main() -> None:
    dsn = os.environ["PROPS_AGENT_DSN"]
    run_id = uuid.UUID(json.loads(os.environ["PROPS_TASK"])["run_id"])
    own_password = dsn.partition("://")[2].partition("@")[0].partition(":")[2]
    tries = Attempts(dsn)
    tries.tried += 1
    leaked = sorted(k for k in os.environ if k not in DECLARED and (
        k.startswith(("PROPS_", "PG")) or k == "DATABASE_URL"))
    if leaked:
        tries.breaches.append(f"the environment holds {', '.join(leaked)}")
    with _session(dsn) as own:
        tries.attempt("a second session of the run's role", functools.partial(
            tries.log_in, *dsn.partition("://")[2].partition("@")[0].split(":", 1)))
        others = [r[0] for r in own.execute(
            "SELECT rolname FROM pg_roles WHERE rolname LIKE 'props\\_agent\\_%' "
            "AND rolname <> current_user").fetchall()]
        for role in ["postgres", "props_service", "props_analyst", *others[:5]]:
            for password in ["", "postgres", own_password]:
                tries.attempt(f"login as {role}", functools.partial(tries.log_in, role,
                                                                    password))
        for table in GROUND_TRUTH_AND_LOG:
            tries.attempt(f"read {table}", functools.partial(
                _fetch, own, sql.SQL("SELECT * FROM {} LIMIT 1").format(
                    sql.Identifier(*table.split(".")))))
        for statement in FORBIDDEN:
            tries.attempt(statement, functools.partial(_fetch, own, sql.SQL(statement)))
        # The launcher's own id of this run's finish: reported, it must not end the run.
        finished_id = uuid.uuid5(LAUNCHER_NAMESPACE, f"{run_id}:finished")
        phase = {"run_id": str(run_id), "phase": "review", "duration_seconds": 0.0}
        own.execute("SELECT agent.report(%s, 'phase.completed', %s::jsonb)",
                    (finished_id, json.dumps(phase)))
    # Hold a transaction (and every reader's fence) open with statements shorter than any
    # timeout, the timeouts SET away: the launcher's watchdog must end the session. (The
    # report takes a transaction id: the only way an agent has.)
    try:
        with _session(dsn, autocommit=False) as holder:
            holder.execute("SET statement_timeout = 0")
            holder.execute("SET idle_in_transaction_session_timeout = 0")
            holder.execute("SELECT agent.report(%s, 'phase.completed', %s::jsonb)",
                           (uuid.uuid4(), json.dumps({**phase, "phase": "hold"})))
            held_since = time.monotonic()
            while time.monotonic() - held_since < 40:
                holder.execute("SELECT pg_sleep(1)")
            tries.breaches.append("held a transaction open for 40 s")
    except psycopg.Error:
        pass
    print(REPORT_PREFIX + json.dumps({"breaches": tries.breaches, "tried": tries.tried}),
          flush=True)
    # Then values no consumer could hold (a token count of 2^63 - 1, a line past any file),
    # and a shape the catalog does not know: the first refused fails the run.
    extremes = [("llm.responded", {"run_id": str(run_id), "request_id": "r",
                                   "response_sha256": "0" * 64, "tokens_in": 2**63 - 1,
                                   "tokens_out": 0, "cost_usd": 0.0, "latency_ms": 1.0}),
                ("issue.reported", {"run_id": str(run_id), "issue_id": "far", "rationale": "",
                                    "locations": [{"file": "a.py", "ranges": [
                                        {"start": 1, "end": 3_000_000_000}]}]}),
                ("issue.reported", {"evil": True})]
    with _session(dsn) as own:
        for type_name, data in extremes:
            own.execute("SELECT agent.report(%s, %s, %s::jsonb)",
                        (uuid.uuid4(), type_name, json.dumps(data)))


def command() -> list[str]:
    """How a definition runs this critic (the host's Python: a local process, or a Docker
    container given the host's Python)."""
    return [sys.executable, "-m", "props.tools.checks.hostile_critic"]


def report_in(logs: bytes) -> dict[str, Any] | None:
    """The hostile critic's report line in a run's logs (None: it did not get that far)."""
    lines = [line for line in logs.decode(errors="replace").splitlines()
             if line.startswith(REPORT_PREFIX)]
    if not lines:
        return None
    found: dict[str, Any] = json.loads(lines[-1].removeprefix(REPORT_PREFIX))
    return found


if __name__ == "__main__":
    main()
