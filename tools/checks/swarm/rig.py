"""A real two-node Docker Swarm on this machine (`two_node_swarm.sh` beside this module):
two new dockerd, each in a network namespace of its own, a docker-registry both pull from,
and a critic image with its own python3, built offline from Debian's packages (debootstrap,
cached as a tar under ~/.cache/props/swarm). The machine's own dockerd is never used.

`missing()` says why it cannot run here (root, the packages); `up` is idempotent (it starts
only what is missing: after `kill_worker`, it restarts the worker's daemon); `down` removes
everything it made.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).with_name("two_node_swarm.sh")
CACHE = Path.home() / ".cache" / "props" / "swarm"
ROOTFS_TAR = CACHE / "rootfs-bookworm-python3.tar"
REGISTRY_DATA = CACHE / "registry"  # the image pushed once, pulled by each new rig
NEEDED = ("dockerd", "docker", "docker-registry", "ip", "nsenter", "unshare", "curl", "bc")
TIMEOUT = 600.0  # seconds `up` may take (debootstrap, when the tar is not cached: ~2 min)


class RigFailed(RuntimeError):
    """The script failed (its stderr's tail is the message): the rig, not props."""


@dataclasses.dataclass(frozen=True)
class Rig:
    directory: Path
    prefix: str
    manager: str  # the manager's engine, unix://...
    worker: str
    image: str  # the critic image, by digest in the rig's registry
    manager_host: str
    worker_host: str

    def _script(self, command: str) -> str:
        return _script(command, self.directory, self.prefix)

    def kill_worker(self) -> None:
        """SIGKILL the worker's dockerd: its node goes Down, its containers live on."""
        self._script("kill-worker")

    def restart_worker(self) -> None:
        self._script("up")

    def down(self) -> None:
        self._script("down")


def missing() -> str | None:
    """Why the rig cannot run on this machine (None: it can)."""
    if os.geteuid() != 0:
        return "a two-node swarm needs root (network namespaces, dockerd)"
    absent = [n for n in NEEDED if shutil.which(n) is None]
    if not ROOTFS_TAR.exists() and shutil.which("debootstrap") is None:
        absent.append("debootstrap (or a cached " + str(ROOTFS_TAR) + ")")
    if absent:
        return f"a two-node swarm needs {', '.join(absent)} (.ci/run installs them)"
    return None


def _script(command: str, directory: Path, prefix: str) -> str:
    env = {**os.environ, "SWARM_DIR": str(directory), "SWARM_PREFIX": prefix,
           "ROOTFS_TAR": str(ROOTFS_TAR), "REGISTRY_DATA": str(REGISTRY_DATA),
           "SWARM_HEARTBEAT": "1s"}
    done = subprocess.run(["bash", str(SCRIPT), command], env=env, capture_output=True,
                          text=True, timeout=TIMEOUT, check=False)
    if done.returncode != 0:
        raise RigFailed(f"{SCRIPT.name} {command} failed ({done.returncode}):\n"
                           f"{done.stderr[-3000:]}")
    return done.stdout


def up(directory: Path, prefix: str = "pxsw") -> Rig:
    out = dict(line.split("=", 1) for line in _script("up", directory, prefix).splitlines()
               if "=" in line)
    return Rig(directory, prefix, out["MANAGER"], out["WORKER"], out["IMAGE"],
               f"{prefix}-mgr", f"{prefix}-w1")
