"""The whole system under load and faults (`props chaos`), and its negative control.

Each run starts its own embedded PostgreSQL (so it may restart it), two `props serve`
replicas and a steady load, injects every kind of fault from a fixed seed, then checks the
invariants. The negative control runs a deliberately broken build (the projection runner
never writes its checkpoint with its rows) through the same faults: the invariants must catch
it, or they prove nothing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.abc
import pytest

from props.tools.checks.chaos.engine_endpoint import EngineEndpoint

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


def short(seed: int) -> list[str]:
    """A fault of each kind: the eight, and in CI the engine's restart."""
    return ["--seed", str(seed), "--seconds", "20", "--runs", "60", "--faults", "9"]


SHORT = short(2026)
# Seeds 9 and 10 broke before, each on a fault of its own: a launcher whose engine was gone
# held a slot for ever (no deadline on engine calls), and a container start that dockerd's
# restart cut was waited on until the run failed engine_unreachable on a healthy engine.
SEEDS = [2026, 9, 10]
# In CI (root, dockerd installed) the run starts an engine of its own and restarts it: the
# machine's, which a suite beside this one may be using, is never touched.
DOCKER = ["--restart-docker"] if os.environ.get("PROPS_REQUIRE_DOCKER") == "1" else []


def chaos(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("PROPS_DSN", "PROPS_HOME")}
    full.update(env or {})
    full["COLUMNS"] = "250"  # the tables unwrapped: a cell's words stay on one line
    return subprocess.run([sys.executable, "-m", "props.tools.cli", "chaos", *args],
                          capture_output=True, text=True, env=full, timeout=900, check=False)


MACHINE_DOCKERD = Path("/var/run/docker.pid")  # the machine's engine (dockerd's default)


@pytest.mark.parametrize("seed", SEEDS)
def test_short_chaos_run_keeps_every_invariant(seed: int) -> None:
    machine = MACHINE_DOCKERD.read_text() if MACHINE_DOCKERD.exists() else None
    out = chaos(*short(seed), *DOCKER)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "every invariant held" in out.stdout
    for fault in ("kill-service", "kill-all-services", "terminate-listeners",
                  "kill-container", "idle-transaction", "restart-postgres", "kill-launcher",
                  "engine-gone"):
        assert fault in out.stdout  # each kind was injected
    assert "a dead launcher's runs taken" in out.stdout
    if DOCKER:  # an engine of the run's own in front of the machine's, taken away
        assert "engine gone for good: its runs fail" in out.stdout
        assert re.search(r"an engine gone for good fails its runs only\s*│\s*HELD", out.stdout)
    assert "PostgreSQL stopped and started" in out.stdout
    assert "every API request is one run" in out.stdout  # half the load came over HTTP
    if DOCKER:
        assert "dockerd stopped and started (the run's own engine)" in out.stdout
        # ... and the machine's engine, which other work may be using, was never restarted.
        assert machine is not None and MACHINE_DOCKERD.read_text() == machine
        assert Path(f"/proc/{machine.strip()}").exists()
    assert "BROKEN" not in out.stdout


def test_a_broken_build_is_caught_by_the_invariants() -> None:
    out = chaos(*SHORT, "--drain-seconds", "30",
                env={"PROPS_BREAK_FOR_TEST": "checkpoint-outside-transaction"})
    assert out.returncode == 1, out.stdout + out.stderr[-3000:]
    assert "AN INVARIANT BROKE" in out.stdout
    broken = [line for line in out.stdout.splitlines() if "BROKEN" in line]
    # A runner that applies events twice is seen by the comparison with a clean rebuild
    # after the check's own restart of a runner; where the faults land, a run graded twice
    # or never or a runner that dies on a duplicate row may see it too: any one of them is
    # a catch. Running out of drain time is not (load alone does that), so it does not count.
    caught = [line for line in broken if "drained in time" not in line]
    assert caught, out.stdout


def test_the_doomed_launchers_endpoint_outlives_its_engine_restarting(tmp_path: Path) -> None:
    """While the engine behind the endpoint restarts (no socket), a connection through it is
    closed, as the engine's own would be, and the endpoint forwards again once the engine is
    back. (It raised, and the whole chaos run ended as a bug of props, exit 70.)"""
    engine = tmp_path / "engine.sock"

    async def echo(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            await stream.send(await stream.receive())

    async def main() -> None:
        endpoint = EngineEndpoint(tmp_path / "front.sock", f"unix://{engine}")
        async with anyio.create_task_group() as tg:
            await tg.start(endpoint.serve)
            async with await anyio.connect_unix(endpoint.path) as client:
                await client.send(b"GET /version")
                with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                    await client.receive()
            listener = await anyio.create_unix_listener(engine)  # the engine is back
            async with listener:
                tg.start_soon(listener.serve, echo)
                async with await anyio.connect_unix(endpoint.path) as client:
                    await client.send(b"ping")
                    assert await client.receive() == b"ping"
                endpoint.take_away()
                tg.cancel_scope.cancel()

    anyio.run(main)
