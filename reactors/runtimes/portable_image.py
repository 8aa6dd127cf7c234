"""Critic images that carry what they run: `props definitions build`.

The reference image (`docker_runtime.build_reference_image`) is nearly empty and runs the
host's Python and props through read-only bind mounts: it exists only on the host that
built it, and a node of a cluster has neither. A portable image carries its interpreter, the
agent SDK and the critic's own files, and is pushed to a registry every node pulls from;
the definition records it by the digest the registry answered, so every node runs the same
bytes.

What goes in, on a base the operator names (any image with `python3` on its PATH), or by
default on Debian bookworm's minbase with python3, made offline from the Debian mirror apt
uses (`debootstrap`, as the swarm rig does; the root filesystem is cached as a tar under
~/.cache/props/swarm and shared with the rig):
- `/opt/props-agent/`: the SDK as `props_agent.py` (the name the how-to's critic imports)
  and what importing it and connecting need: psycopg, its binary build (which bundles
  libpq) and typing_extensions, copied from props' own environment. Nothing else of props
  (no asyncpg, no pydantic): the SDK needs the standard library and psycopg only.
- `/critic/`: the critic's files;
- `PYTHONPATH=/opt/props-agent`, the command as `CMD` and as the `props.command` label.
The build runs one step in the image itself: the base's python3 imports the SDK and
psycopg's libpq (a base whose Python is not the one psycopg's binary build is for is
refused there, saying which), and compiles the files (the root is read-only at run time).
The build has no network (`networkmode none`) and pulls nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import os
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiodocker
import anyio
import anyio.to_thread

from props.core.domain import image_refs
from props.core.log import errors
from props.reactors.agents import sdk
from props.reactors.runtimes import docker_runtime

CACHE = Path.home() / ".cache" / "props" / "swarm"  # the swarm rig's cache (tools/checks/swarm)
ROOTFS_TAR = CACHE / "rootfs-bookworm-python3.tar"
BASE_REPO = "props-base"  # a base imported from a root filesystem tar, tagged by its hash
SDK_TARGET = "/opt/props-agent"
SDK_MODULE = "props_agent"
CRITIC_TARGET = "/critic"
DEFAULT_CRITIC = "critic.py"  # a folder's command when none is given: python3 /critic/critic.py
MAX_CRITIC_FILES = 5000
MAX_CRITIC_BYTES = 64 * 1024 * 1024  # the build's context is held in memory once
MAX_BASE_BYTES = 8 * 1024**3  # a root filesystem tar the operator names
DEBOOTSTRAP_DEADLINE = 1800.0  # seconds: 83-110 s measured, much more on a slow mirror
ENGINE_DEADLINE = 1200.0  # seconds an import, a build or a push of the image may take
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Not needed in a critic's image: package caches, documentation, translations (125 MB left).
SLIM = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man",
        "usr/share/locale")
_SDK_PACKAGES = ("psycopg", "psycopg_binary", "typing_extensions")
CHECKED = "props-check:"  # the image's own check says how it went on a line starting so

# Run by the base's python3 during the build, as root: what a run will import must import
# (the SDK, psycopg with libpq), and is compiled now since the root is read-only later.
CHECK = r"""
import sys
seen = "%d.%d.%d" % sys.version_info[:3]
try:
    if "%d.%d" % sys.version_info[:2] != sys.argv[1]:
        raise RuntimeError("props' psycopg binary build is for Python " + sys.argv[1])
    import compileall, props_agent, psycopg, psycopg.pq
    libpq = psycopg.pq.version()
    for folder in sys.argv[2:]:
        compileall.compile_dir(folder, quiet=2)
except Exception as exc:
    print("props-check: failed: python %s: %s: %s" % (seen, type(exc).__name__, exc))
    sys.exit(3)
print("props-check: python %s, psycopg %s (libpq %d)" % (seen, psycopg.__version__, libpq))
"""


class CriticRefused(errors.PropsError):
    """The critic's files cannot go into an image as they are: nothing was built."""

    exit_code = 65  # EX_DATAERR: what the operator gave


class BaseUnavailable(errors.PropsError):
    """No base to build on: nothing was built."""

    exit_code = 69  # EX_UNAVAILABLE


class BaseRefused(errors.PropsError):
    """The base named is not one (a folder, not a tar, too large): nothing was built."""

    exit_code = 65


class BuildFailed(errors.PropsError):
    """The image's own check failed on this base (no python3, another Python version)."""

    exit_code = 65


class PushFailed(errors.PropsError):
    """The registry refused the image, or could not be reached: nothing was recorded."""

    exit_code = 69


@dataclasses.dataclass(frozen=True)
class CriticFiles:
    source: Path
    files: list[tuple[str, Path]]  # (path under /critic, the file here)
    size: int

    def default_command(self) -> list[str] | None:
        """`python3 /critic/FILE` for one file, or a folder's critic.py; None: give one."""
        names = [name for name, _ in self.files]
        if self.source.is_file():
            return ["python3", f"{CRITIC_TARGET}/{names[0]}"]
        return ["python3", f"{CRITIC_TARGET}/{DEFAULT_CRITIC}"] \
            if DEFAULT_CRITIC in names else None


def critic_files(source: Path) -> CriticFiles:
    """What the image holds of the critic: `source` itself (a file) or every file under it
    (a folder; compiled caches, `__pycache__`, left out), bounded. A symbolic link or
    anything but a regular file is refused: an image holds what it names, nothing of the
    host's beyond it."""
    if not source.exists() and not source.is_symlink():
        raise errors.NotFound(f"no file or folder {source}: --critic names the critic's "
                              f"script, or the folder holding its files")
    if source.is_symlink() or not (source.is_file() or source.is_dir()):
        raise CriticRefused(f"{source} is not a regular file or folder: name what it "
                            f"points to")
    if source.is_file():
        found = [(source.name, source)]
    else:
        found = _walk(source)
    size = 0
    for _, path in found:
        size += path.stat().st_size
        if size > MAX_CRITIC_BYTES:
            raise CriticRefused(f"{source} holds more than {MAX_CRITIC_BYTES // 2**20} MiB: "
                                f"a critic's own files, not its data, go into the image")
    if not found:
        raise CriticRefused(f"{source} holds no file")
    return CriticFiles(source, found, size)


def _walk(folder: Path) -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for entry in [*dirs, *sorted(names)]:
            path = Path(root) / entry
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode) or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise CriticRefused(f"{path} is a symbolic link or a special file: the "
                                    f"image holds regular files only (copy what it names)")
            if stat.S_ISREG(mode):
                found.append((path.relative_to(folder).as_posix(), path))
            if len(found) > MAX_CRITIC_FILES:
                raise CriticRefused(f"{folder} holds more than {MAX_CRITIC_FILES:,} files: a "
                                    f"critic's own files, not its data, go into the image")
    return found


# -- the SDK and what it imports -----------------------------------------------------------------


def sdk_files() -> list[tuple[str, Path]]:
    """The SDK as props_agent.py, and psycopg (pure Python), its binary build with the
    libraries it bundles (`psycopg_binary.libs`), typing_extensions: from props' own
    environment, compiled caches left out."""
    out: list[tuple[str, Path]] = [(f"{SDK_MODULE}.py", Path(str(sdk.__file__)))]
    for name in _SDK_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise BaseUnavailable(f"props' environment has no {name} to copy into the image "
                                  f"(pip install 'psycopg[binary]')")
        origin = Path(spec.origin)
        top = origin.parent if origin.name == "__init__.py" else origin
        # The package, the libraries its wheel bundles, and its metadata (psycopg reads
        # its own version from it).
        version = importlib.metadata.version(name.replace("_", "-"))
        for path in (top, top.with_name(f"{name}.libs"),
                     top.with_name(f"{name}-{version}.dist-info")):
            if path.is_file():
                out.append((path.name, path))
            elif path.is_dir():
                out += [(f"{path.name}/{rel}", file) for rel, file in _walk(path)]
    return out


def sdk_sha256() -> str:
    """Which SDK an image carries: its file's hash (the image's `props.sdk` label)."""
    return "sha256:" + hashlib.sha256(Path(str(sdk.__file__)).read_bytes()).hexdigest()


def sdk_python() -> str:
    """The Python version psycopg's binary build is for ("3.11"): the base's must be it."""
    wheel = importlib.metadata.distribution("psycopg-binary").read_text("WHEEL") or ""
    tag = re.search(r"^Tag: cp(\d)(\d+)-", wheel, re.MULTILINE)
    if tag is None:
        raise BaseUnavailable("props' psycopg-binary says no CPython version (its WHEEL "
                              "file): reinstall it (pip install 'psycopg[binary]')")
    return f"{tag[1]}.{tag[2]}"


# -- the build's context -------------------------------------------------------------------------


def dockerfile(base: str, command: list[str]) -> str:
    check = json.dumps(["python3", "-c", CHECK, sdk_python(), SDK_TARGET, CRITIC_TARGET])
    return (f"FROM {base}\n"
            f"COPY sdk/ {SDK_TARGET}/\n"
            f"COPY critic/ {CRITIC_TARGET}/\n"
            f"ENV PYTHONPATH={SDK_TARGET}\n"
            f"RUN {check}\n"
            f"CMD {json.dumps(command)}\n")


def context(base: str, critic: CriticFiles, command: list[str]) -> bytes:
    """The build's context as a tar: the Dockerfile, sdk/ and critic/, every file readable
    by the run's user (nobody), owned by root."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add(tar, "Dockerfile", dockerfile(base, command).encode(), 0o644)
        for prefix, files in (("sdk", sdk_files()), ("critic", critic.files)):
            for name, path in files:
                executable = os.access(path, os.X_OK)
                _add(tar, f"{prefix}/{name}", path.read_bytes(),
                     0o755 if executable else 0o644)
    return buf.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


# -- the default base: Debian's minbase with python3, made offline -------------------------------


def mirror() -> str:
    """The Debian mirror: DEBIAN_MIRROR, else the first Debian one apt's sources name."""
    if found := os.environ.get("DEBIAN_MIRROR"):
        return found
    texts = []
    for path in [Path("/etc/apt/sources.list"),
                 *sorted(Path("/etc/apt/sources.list.d").glob("*.list")),
                 *sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))]:
        try:
            texts.append(path.read_text())
        except OSError:
            continue
    for text in texts:
        for url in re.findall(r"https?://\S+/debian/?(?=\s|$)", text, re.MULTILINE):
            return str(url)
    raise BaseUnavailable("no Debian mirror in apt's sources to make the base from: set "
                          "DEBIAN_MIRROR=URL, or name a base (--base IMAGE or --base FILE.tar)")


def rootfs_missing() -> str | None:
    """Why the default base cannot be made here (None: it can, or it is cached)."""
    if ROOTFS_TAR.is_file():
        return None
    if os.geteuid() != 0:
        return "making it needs root (debootstrap)"
    if shutil.which("debootstrap") is None:
        return "making it needs debootstrap (apt-get install debootstrap)"
    return None


def make_rootfs(tar: Path, source: str) -> None:
    """Debian bookworm's minbase with python3, from `source` (a mirror), slimmed and kept as
    `tar` (written whole or not at all: a partial file is renamed only when complete)."""
    tar.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=tar.parent))
    partial = tar.with_name(f"{tar.name}.{os.getpid()}.partial")
    try:
        root = work / "root"
        done = subprocess.run(
            ["debootstrap", "--variant=minbase", "--include=python3", "bookworm", str(root),
             source], capture_output=True, text=True, timeout=DEBOOTSTRAP_DEADLINE,
            check=False)
        if done.returncode != 0:
            tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
            raise BaseUnavailable(f"debootstrap from {source} failed ({done.returncode}): "
                                  f"{tail[-400:]}")
        for part in SLIM:
            shutil.rmtree(root / part, ignore_errors=True)
        subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(partial), "."],
                       check=True, capture_output=True, timeout=DEBOOTSTRAP_DEADLINE)
        os.replace(partial, tar)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        partial.unlink(missing_ok=True)


def check_base_tar(path: Path) -> None:
    """A root filesystem tar the operator names: a tar, and bounded."""
    size = path.stat().st_size
    if size > MAX_BASE_BYTES:
        raise BaseRefused(f"{path} is {size / 2**30:.1f} GiB, more than a base may be "
                          f"({MAX_BASE_BYTES // 2**30} GiB)")
    if not tarfile.is_tarfile(path):
        raise BaseRefused(f"{path} is not a tar: --base names an image, or a root "
                          f"filesystem as a tar (tar -C ROOT -cf FILE.tar .)")


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


# -- on the engine --------------------------------------------------------------------------------


async def _chunks(path: Path) -> AsyncIterator[bytes]:
    with path.open("rb") as f:  # (opened here: the engine reads the file as it streams)
        while chunk := await anyio.to_thread.run_sync(f.read, 1 << 20):
            yield chunk


async def import_base(docker: aiodocker.Docker, tar: Path) -> str:
    """The root filesystem `tar` as an image (`docker import`), tagged by the tar's hash: an
    image already there is reused. PATH and LANG set, as a distribution's image sets them."""
    digest = await anyio.to_thread.run_sync(file_sha256, tar)
    ref = f"{BASE_REPO}:{digest[:16]}"
    if await has_image(docker, ref):
        return ref
    # The engine joins its `changes` with newlines and reads them as a Dockerfile (moby's
    # BuildFromConfig): one value holds them all (aiodocker sends each key once).
    changes = f'ENV PATH={DEFAULT_PATH}\nENV LANG=C.UTF-8\nCMD ["python3"]'
    params = {"fromSrc": "-", "repo": BASE_REPO, "tag": digest[:16], "changes": changes}
    with anyio.fail_after(ENGINE_DEADLINE):
        async with docker._query("images/create", method="POST", params=params,
                                 data=_chunks(tar), timeout=ENGINE_DEADLINE,
                                 headers={"Content-Type": "application/x-tar"}) as response:
            said = await response.read()
    if not await has_image(docker, ref):
        raise BaseUnavailable(f"the engine did not import {tar}: {said[-300:]!r}")
    return ref


async def has_image(docker: aiodocker.Docker, ref: str) -> bool:
    return await docker_runtime.holds_image(docker, ref, 60)


async def build(docker: aiodocker.Docker, archive: bytes, tag: str,
                labels: dict[str, str]) -> str:
    """Build the context `archive` as `tag`, without network, pulling nothing; returns the
    line the image's own check printed. A failed step raises BuildFailed with its words."""
    # No cache: the check runs in every build, so what it says is of this build.
    params = {"t": tag, "rm": "1", "forcerm": "1", "pull": "0", "nocache": "1",
              "networkmode": "none", "labels": json.dumps(labels)}
    lines: list[str] = []
    with anyio.fail_after(ENGINE_DEADLINE):
        async with docker._query("build", method="POST", params=params, data=archive,
                                 timeout=ENGINE_DEADLINE,
                                 headers={"Content-Type": "application/x-tar"}) as response:
            async for raw in response.content:
                item = _json_line(raw)
                if "error" in item:
                    raise BuildFailed(_build_error(str(item["error"]), lines))
                lines += str(item.get("stream", "")).splitlines()
    checked = [line for line in lines if line.startswith(CHECKED)]
    if not checked:
        raise BuildFailed("the image built, but its check said nothing: this engine's build "
                          "did not run it (a BuildKit or Podman build that hides a step's "
                          "output?); nothing was pushed")
    return checked[-1].removeprefix(CHECKED).strip()


def _json_line(raw: bytes) -> dict[str, Any]:
    try:
        item = json.loads(raw)
    except ValueError:
        return {}
    return item if isinstance(item, dict) else {}


def _build_error(error: str, lines: list[str]) -> str:
    """The build's failure in the operator's words: the check's own line when it ran."""
    checked = [line.removeprefix(CHECKED).strip() for line in lines if line.startswith(CHECKED)]
    if checked:
        return (f"the base cannot run the SDK: {checked[-1]} (name a base whose python3 is "
                f"Python {sdk_python()}, the one props' psycopg is built for)")
    if "executable file not found" in error or "no such file" in error.lower():
        return f"the base has no python3 on its PATH ({error.strip()[:200]})"
    return f"the image did not build: {error.strip()[:300]}"


async def push(docker: aiodocker.Docker, image: str, target: image_refs.Reference) -> str:
    """Tag `image` as `target` and push it; returns the digest the registry answered."""
    assert target.tag is not None and target.registry is not None  # (a push target's)
    digest = ""
    try:
        with anyio.fail_after(60):
            await docker.images.tag(image, target.name, tag=target.tag)
        with anyio.fail_after(ENGINE_DEADLINE):
            async for item in docker.images.push(target.name, tag=target.tag, stream=True,
                                                 timeout=ENGINE_DEADLINE):
                aux = item.get("aux") if isinstance(item, dict) else None
                if isinstance(aux, dict) and isinstance(aux.get("Digest"), str):
                    digest = aux["Digest"]
    except aiodocker.DockerError as exc:
        raise PushFailed(f"{target.registry} did not take {target}: {exc.message}"[:500]
                         + " (is the registry running, and reachable from the engine? a "
                         "registry without TLS must be localhost or in the engine's "
                         "insecure-registries)") from exc
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise PushFailed(f"{target.registry} answered no digest for {target}")
    return digest
