"""Containers as local processes: the default where no Docker engine is reachable.

Each "container" is a directory under the runtime's root, named by the container name, holding
the spec, the shim's pid, the output and, once it ended, exit.json (see `local_shim`). The
directory is the deterministic identity: `start` finds it before launching anything. There is
no isolation beyond a process group and a memory limit: use Docker for agents you do not trust.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

import anyio
import anyio.to_thread

from props.core import errors
from props.reactors.containers import (
    LABEL,
    MAX_LOG_BYTES,
    ContainerSpec,
    Mount,
    Outcome,
    host_capacity,
)

_POLL = 0.05


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


class LocalRuntime:
    kind: Literal["docker", "local"] = "local"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def _dir(self, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise errors.PropsError(f"invalid container name {name!r}")
        return self.root / name

    def _shim_pid(self, name: str) -> int | None:
        try:
            return int((self._dir(name) / "shim.pid").read_text())
        except (OSError, ValueError):
            return None

    async def start(self, spec: ContainerSpec) -> str:
        return await anyio.to_thread.run_sync(self._start, spec)

    def _start(self, spec: ContainerSpec) -> str:
        state = self._dir(spec.name)
        if (state / "shim.pid").exists():
            return spec.name  # started before (perhaps by a launcher that died): adopt it
        state.mkdir(parents=True, exist_ok=True)
        (state / "spec.json").write_text(json.dumps({"labels": spec.labels}))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **spec.env,
               "PROPS_SHIM_MEMORY_MB": str(spec.memory_mb)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "props.reactors.local_shim", str(state), "--",
             *spec.command],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(state / "logs", "ab"),  # the shim owns it from here
            start_new_session=True,  # survives this process: a restart adopts it
        )
        self._children[spec.name] = proc
        tmp = state / "shim.pid.tmp"
        tmp.write_text(str(proc.pid))
        tmp.rename(state / "shim.pid")
        return spec.name

    def _outcome(self, name: str) -> Outcome | None:
        state = self._dir(name)
        try:
            data = json.loads((state / "exit.json").read_text())
        except FileNotFoundError:
            pid = self._shim_pid(name)
            child = self._children.get(name)
            if child is not None:
                child.poll()  # reap our own child, so it does not linger as a zombie
            if pid is None or _alive(pid):
                return None
            # The shim died without a word (killed from outside): the run is lost.
            time.sleep(0)  # exit.json may have landed between the two reads
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
                self._children.pop(name, None)
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
        self._children.pop(name, None)

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
