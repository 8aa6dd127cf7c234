"""Memory peaks for the benchmarks, from Linux's /proc: a process's peak resident set
(VmHWM, which writing 5 to /proc/self/clear_refs resets, so each phase has its own), and the
PostgreSQL server's private memory (RssAnon: sorts, hashes, caches of its processes; the
shared buffers are not counted) summed over its processes and sampled while a phase runs.

Where /proc cannot say (another OS, a server on another machine), the figure is None with
its reason, never a guess.
"""

from __future__ import annotations

import contextlib
import resource
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.to_thread
import asyncpg

SAMPLE_SECONDS = 0.2


def _status_kib(pid: int | str, field: str) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def peak_kib(pid: int | None = None) -> int | None:
    """The process's peak resident set since it started or since `reset_peak` (KiB)."""
    return _status_kib(pid if pid is not None else "self", "VmHWM")


def reset_peak() -> bool:
    """Start this process's peak anew (Linux 4.0+); False where it cannot be reset (the
    peak then covers the whole process, as getrusage's ru_maxrss does)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def lifetime_peak_kib() -> int:
    """getrusage's peak of this process over its whole life (KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class ServerSampler:
    """The peak, over samples, of the server's private memory summed over its processes."""

    def __init__(self, postmaster: int | None, reason: str | None) -> None:
        self.postmaster = postmaster
        self.reason = reason
        self.peak_kib = 0

    def _children(self) -> list[int]:
        assert self.postmaster is not None
        out = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # gone meanwhile
            # pid (comm) state ppid ...: comm may hold spaces, so split after its ')'.
            if int(stat.rsplit(")", 1)[1].split()[1]) == self.postmaster:
                out.append(int(entry.name))
        return out

    def sample(self) -> None:
        if self.postmaster is None:
            return
        total = sum(_status_kib(pid, "RssAnon") or 0 for pid in [self.postmaster,
                                                                  *self._children()])
        self.peak_kib = max(self.peak_kib, total)

    @contextlib.asynccontextmanager
    async def sampling(self) -> AsyncIterator[ServerSampler]:
        """Sample while the block runs; `peak_kib` is the block's peak afterwards."""
        self.peak_kib = 0
        if self.postmaster is None:
            yield self
            return
        async with anyio.create_task_group() as tg:
            async def loop() -> None:
                while True:
                    await anyio.to_thread.run_sync(self.sample)
                    await anyio.sleep(SAMPLE_SECONDS)

            tg.start_soon(loop, name="bench-server-memory")
            try:
                yield self
            finally:
                tg.cancel_scope.cancel()
        self.sample()


async def server_sampler(pool: asyncpg.Pool) -> ServerSampler:
    """A sampler of the server behind `pool`, if its processes are this machine's."""
    return _sampler_of(await pool.fetchval("SELECT pg_backend_pid()"))


def _sampler_of(backend: int) -> ServerSampler:
    try:
        stat = Path(f"/proc/{backend}/stat").read_text()
        comm = stat.split("(", 1)[1].rsplit(")", 1)[0]
    except OSError:
        return ServerSampler(None, "the server's processes are not on this machine")
    if not comm.startswith("postgres"):  # a pid of another machine's server, taken here
        return ServerSampler(None, f"process {backend} here is not the server's ({comm})")
    return ServerSampler(int(stat.rsplit(")", 1)[1].split()[1]), None)
