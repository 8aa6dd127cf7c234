"""A critic that tries everything an agent must not be able to do, then reports malformed data.

Run by the launcher like any critic (local process or Docker container). Every attempt that
works is a breach; the agent prints one line `HOSTILE {"breaches": [...], "tried": N}` that
the test reads from the container's logs. Then it reports an event the catalog refuses, so
its run must end `failed` with a closed failure fact while honest runs go on beside it.
"""

from __future__ import annotations

import json
import os
import time
import uuid

import psycopg

DSN = os.environ["PROPS_AGENT_DSN"]
TASK = json.loads(os.environ["PROPS_TASK"])
RUN_ID = uuid.UUID(TASK["run_id"])
breaches: list[str] = []
tried = 0


def as_role(role: str, password: str) -> str:
    scheme, _, rest = DSN.partition("://")
    return f"{scheme}://{role}:{password}@{rest.partition('@')[2]}"


def attempt(name: str, fn: object) -> None:
    """Try `fn`; it working is a breach."""
    global tried
    tried += 1
    try:
        fn()  # type: ignore[operator]
    except Exception:
        return
    breaches.append(name)


def connect(role: str, password: str) -> None:
    psycopg.connect(as_role(role, password), connect_timeout=5).close()


with psycopg.connect(DSN, autocommit=True) as own:
    others = [r[0] for r in own.execute(
        "SELECT rolname FROM pg_roles WHERE rolname LIKE 'props\\_agent\\_%' "
        "AND rolname <> current_user").fetchall()]
    for role in ["postgres", "props_service", "props_analyst", *others[:5]]:
        for password in ["", "postgres", DSN.split(":")[2].split("@")[0]]:
            attempt(f"login as {role}", lambda r=role, p=password: connect(r, p))
    for table in ["props.events", "props.blobs", "props.agent_bindings", "props.checkpoints",
                  "props.api_tokens", "projections.ground_truth_tps",
                  "projections.ground_truth_fps", "projections.true_positives",
                  "projections.agent_runs", "projections.reported_issues"]:
        attempt(f"read {table}",
                lambda t=table: own.execute(f"SELECT * FROM {t} LIMIT 1").fetchall())
    for sql in ["SELECT lo_create(0)", "SELECT pg_advisory_lock(1)",
                "SELECT pg_try_advisory_lock(hashtext('x'))", "CREATE TEMP TABLE t (x int)",
                "SELECT pg_notify('props_events', 'x')",
                "UPDATE props.agent_bindings SET max_events = 1000000",
                "SELECT pg_read_file('/etc/passwd')"]:
        attempt(sql, lambda s=sql: own.execute(s).fetchall())
    # The launcher's own id of this run's finish: reported, it must not end the run.
    finished_id = uuid.uuid5(uuid.UUID("e3a1c7d2-64b5-4f0a-8a43-0c3e2b9d7f11"),
                             f"{RUN_ID}:finished")
    phase = {"run_id": str(RUN_ID), "phase": "review", "duration_seconds": 0.0}
    own.execute("SELECT agent.report(%s, 'phase.completed', %s::jsonb)",
                (finished_id, json.dumps(phase)))

# Hold a transaction (and every reader's fence) open with statements shorter than any
# timeout, the timeouts SET away: the watchdog must end the session.
try:
    with psycopg.connect(DSN) as holder:
        holder.execute("SET statement_timeout = 0")
        holder.execute("SET idle_in_transaction_session_timeout = 0")
        holder.execute("SELECT pg_current_xact_id()")
        held_since = time.monotonic()
        while time.monotonic() - held_since < 40:
            holder.execute("SELECT pg_sleep(1)")
        breaches.append("held a transaction open for 40 s")
except psycopg.Error:
    pass

print("HOSTILE " + json.dumps({"breaches": breaches, "tried": tried}), flush=True)
with psycopg.connect(DSN, autocommit=True) as own:
    own.execute("SELECT agent.report(%s, 'issue.reported', %s::jsonb)",
                (uuid.uuid4(), json.dumps({"evil": True})))
