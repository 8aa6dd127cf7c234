"""Containers as local processes: the default where no Docker engine is reachable.

Each "container" is a directory under the runtime's root, named by the container name, holding
the spec, the shim's pid, the output and, once it ended, exit.json (see `local_shim`). The
directory is the deterministic identity: `start` finds it before launching anything. There is
no isolation beyond a process group and a memory limit, and a local process runs as the
launcher's user: so by default the local runtime runs only the agents props ships (its own
modules, run by this interpreter in isolated mode), and refuses any other command
(`untrusted_local_command`). An operator who wrote a local definition's command himself says so
(`trust_commands`, `props serve --trust-local-commands`); use Docker for agents you do not
trust.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import anyio
import anyio.to_thread

from props.core.log import errors
from props.reactors.runtimes.container_runtime import (
    LABEL,
    MAX_LOG_BYTES,
    ContainerSpec,
    Mount,
    Outcome,
    Reach,
    host_capacity,
)

_POLL = 0.05
LOST_AFTER = 10.0  # seconds a claim may stand without a shim before it counts as never spawned


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie has exited: it only waits to be reaped by its parent.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _reap(pid: int) -> None:
    """Collect the shim's exit if this process started it (else it is not ours to reap)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


class UntrustedLocalCommand(errors.PropsError):
    """The local runtime runs only the agents props ships: anything else would run as the
    launcher's user, on its host. Push the definition as a Docker image, or (for a command an
    operator wrote) serve with --trust-local-commands."""

    exit_code = 77


def ships(command: list[str]) -> bool:
    """A command of one of props' own modules (`python [-I] -m props.…`), run by this
    interpreter: code that the launcher's installation holds, not a definition's."""
    return (len(command) in (3, 4) and command[0] == sys.executable
            and command[1:-1] in (["-m"], ["-I", "-m"])
            and command[-1].startswith("props.") and command[-1].replace(".", "").replace(
                "_", "").isalnum())


class LocalRuntime:
    kind: str = "local"

    def __init__(self, root: Path, *, trust_commands: bool = False) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.trust_commands = trust_commands

    def _dir(self, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise errors.PropsError(f"invalid container name {name!r}")
        return self.root / name

    def _shim_pid(self, name: str) -> int | None:
        try:
            return int((self._dir(name) / "shim.pid").read_text())
        except (OSError, ValueError):
            return None

    async def prepare(self, spec: ContainerSpec, run_dir: Path, reach: Reach) -> ContainerSpec:
        """A local process reaches the database as the launcher does (the host's address),
        and keeps its home in the run's directory (the launcher's user's own is not its)."""
        return dataclasses.replace(
            spec, env={**spec.env, "PROPS_AGENT_DSN": reach.host_dsn(), "HOME": str(run_dir)})

    async def start(self, spec: ContainerSpec) -> str:
        return await anyio.to_thread.run_sync(self._start, spec)

    def _start(self, spec: ContainerSpec) -> str:
        if not (self.trust_commands or ships(spec.command)):
            raise UntrustedLocalCommand()
        state = self._dir(spec.name)
        state.mkdir(parents=True, exist_ok=True)
        if self._never_spawned(state):
            # Its claimer died between the claim and the spawn: nothing ran, so the run is
            # launched now rather than counted as lost.
            (state / "claimed").unlink(missing_ok=True)
        try:
            # The claim is atomic: of two starts (a launcher and its restarted self), one
            # spawns and the other adopts, whatever the timing.
            os.close(os.open(state / "claimed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return spec.name
        (state / "spec.json").write_text(json.dumps({"labels": spec.labels}))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **spec.env,
               "PROPS_SHIM_MEMORY_MB": str(spec.memory_mb)}
        log_fd = os.open(state / "logs", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            # A new session: the shim outlives this process, and a restart adopts it.
            pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-m", "props.reactors.runtimes.local_shim", str(state), "--",
                 *spec.command],
                env, setsid=True,
                file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                              (os.POSIX_SPAWN_DUP2, log_fd, 1),
                              (os.POSIX_SPAWN_DUP2, log_fd, 2)])
        finally:
            os.close(log_fd)
        tmp = state / "shim.pid.tmp"
        tmp.write_text(str(pid))
        tmp.rename(state / "shim.pid")
        return spec.name

    @staticmethod
    def _never_spawned(state: Path) -> bool:
        """Claimed long ago, and no trace of a shim: the claim is not a spawn in progress
        (the shim writes child.pid within milliseconds of its start)."""
        claimed = state / "claimed"
        try:
            age = time.time() - claimed.stat().st_mtime
        except FileNotFoundError:
            return False
        return age > LOST_AFTER and not any(
            (state / f).exists() for f in ("shim.pid", "child.pid", "exit.json"))

    def _outcome(self, name: str) -> Outcome | None:
        state = self._dir(name)
        try:
            data = json.loads((state / "exit.json").read_text())
        except FileNotFoundError:
            pid = self._shim_pid(name)
            if pid is None:
                # Claimed, but the claimer died before it spawned the shim, and nobody has
                # started it again since (`start` would): lost.
                return Outcome(exit_code=None) if self._never_spawned(state) else None
            _reap(pid)
            if _alive(pid):
                return None
            # The shim died without a word (killed from outside): the run is lost, unless
            # exit.json landed between the two reads.
            if (state / "exit.json").exists():
                return self._outcome(name)
            return Outcome(exit_code=None)
        return Outcome(exit_code=data["exit_code"], oom_killed=bool(data["oom_killed"]))

    async def wait(self, name: str, within: float | None) -> Outcome | None:
        if not self._dir(name).exists():
            raise errors.PropsError(f"no local container named {name}")
        deadline = None if within is None else time.monotonic() + within
        while True:
            found = self._outcome(name)
            if found is not None:
                return found
            if deadline is not None and time.monotonic() >= deadline:
                return None
            await anyio.sleep(_POLL)

    async def kill(self, name: str) -> None:
        state = self._dir(name)
        try:
            child = int((state / "child.pid").read_text())
        except (OSError, ValueError):
            child = None
        if child is not None:
            try:
                os.killpg(child, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        elif (pid := self._shim_pid(name)) is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)  # killed before it started the command

    async def logs(self, name: str) -> bytes:
        return await anyio.to_thread.run_sync(self._logs, name)

    def _logs(self, name: str) -> bytes:
        path = self._dir(name) / "logs"
        try:
            with open(path, "rb") as f:
                f.seek(max(0, path.stat().st_size - MAX_LOG_BYTES))
                return f.read()
        except FileNotFoundError:
            return b""

    async def remove(self, name: str) -> None:
        await self.kill(name)
        shutil.rmtree(self._dir(name), ignore_errors=True)

    async def names(self, label: str = LABEL) -> dict[str, str]:
        found = {}
        for state in self.root.iterdir():
            try:
                labels = json.loads((state / "spec.json").read_text())["labels"]
            except (OSError, ValueError, KeyError):
                continue
            if label in labels:
                found[state.name] = labels[label]
        return found

    def visible_path(self, mount: Mount) -> str:
        return mount.host

    def capacity(self) -> int:
        return host_capacity()
