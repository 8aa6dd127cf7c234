"""`props definitions build`: a critic image that carries what it runs.

With the real Docker engine and Debian's docker-registry on a free loopback port: the image
is built on the default base (Debian's minbase with python3, the swarm rig's cached root
filesystem, made by debootstrap when missing), pushed, recorded by the registry's digest, and
a critic run in it on the docker runtime completes and is graded, its container holding no
bind mount of the host's /usr or Python (read from inside the container). The negative
controls: the same check sees the mounts of today's reference image, and that image without
them cannot run its python at all. Every refused input says one line, exits with its
documented code and writes nothing.
"""

from __future__ import annotations

import functools
import re
import shutil
import sys
import uuid
from pathlib import Path

import anyio.to_thread
import httpx
import pytest

from props.core.domain import definitions, image_refs
from props.core.log.store import EventStore
from props.reactors.runtimes import portable_image, swarm_runtime
from props.reactors.runtimes.container_runtime import LABEL, ContainerSpec, Mount
from props.reactors.runtimes.docker_runtime import DockerRuntime
from props.tools.checks.swarm import rig
from props.tools.command_line.commands import runs as run_commands
from tests.conftest import REFERENCE_IMAGE, docker_required, once_per_ci
from tests.reactor_helpers import sync_samples
from tests.test_api import upstream_registry
from tests.test_cli import props

HOWTO_CRITIC = Path(__file__).resolve().parents[1] / "docs" / "howto" / "critic" / "critic.py"
# Prints, from inside the container, where its python is and every mount point it has.
MOUNTS = """\
import sys
print("python", sys.executable, "%d.%d.%d" % sys.version_info[:3])
with open("/proc/self/mountinfo") as f:
    for line in f:
        print("mount", line.split()[4])
"""
MAIN = """\
import runpy
import mounts
runpy.run_path("/critic/critic.py", run_name="__main__")
"""
SYSTEM = ("/usr", "/lib", "/lib64", "/bin", "/sbin")


def host_mounts(output: str) -> list[str]:
    """The mount points in `output` (MOUNTS's lines) that bring the host's system or Python
    into the container: what a portable image must not need."""
    host = {*SYSTEM, *definitions.host_python_paths()}
    points = re.findall(r"^mount (\S+)$", output, re.MULTILINE)
    assert points, output  # (no mount line at all is no evidence either way)
    return [p for p in points if any(p == h or p.startswith(h.rstrip("/") + "/") for h in host)]


def test_the_bounds_and_the_cache_are_one() -> None:
    """The parser's help states the builder's bounds; the default base is the swarm rig's."""
    assert run_commands.MAX_CRITIC_FILES == portable_image.MAX_CRITIC_FILES
    assert run_commands.MAX_CRITIC_MIB * 2**20 == portable_image.MAX_CRITIC_BYTES
    assert portable_image.ROOTFS_TAR == rig.ROOTFS_TAR


@pytest.mark.parametrize(("text", "fine"), [
    ("localhost:5000/critics/mine:1", True), ("127.0.0.1:5057/a:b", True),
    ("registry.example/x/y:v1.2", True), ("team/critic:1", False),  # Docker Hub's
    ("localhost:5000/Critic:1", False), ("localhost:5000/critic", False),  # no tag
    ("localhost:5000/c:1@sha256:" + "a" * 64, False), ("localhost:5000/c:" + "t" * 129, False),
    ("localhost:5000/" + "a" * 250 + ":1", False), ("localhost:5000/c:1\n", False),
    ("localhost:5000/c:\u00e91", False), ("localhost:70000/c:1", False),
])
def test_a_push_names_a_registry_and_a_tag(text: str, fine: bool) -> None:
    if fine:
        assert str(image_refs.push_target(text)) == text
    else:
        with pytest.raises(ValueError, match=re.escape(repr(text[:80])[:20])):
            image_refs.push_target(text)


def _refusals(tmp_path: Path) -> list[tuple[list[str], int, str]]:
    ok = ["--push", "localhost:5000/critics/mine:1"]
    link = tmp_path / "linked"
    link.mkdir()
    (link / "critic.py").write_text("print()\n")
    (link / "data").symlink_to("/etc/passwd")
    no_default = tmp_path / "no-default"
    no_default.mkdir()
    (no_default / "main.py").write_text("print()\n")
    not_tar = tmp_path / "base.tar"
    not_tar.write_text("not a tar")
    url = tmp_path / "config.json"
    url.write_text('{"url": "http://example.invalid/v1"}')
    critic = ["--critic", str(HOWTO_CRITIC)]
    return [
        ([*critic, "--push", "team/critic:1"], 2, "names no registry"),
        ([*critic, "--push", "localhost:5000/c@sha256:" + "0" * 64], 2, "names a digest"),
        ([*critic, "--push", "localhost:5000/Upper:1"], 2, "is not an image reference"),
        ([*critic, *ok, "--name", "x" * 201], 2, "is not a name"),
        ([*critic, *ok, "--runtime", "Not A Name"], 2, "is not a runtime's name"),
        (["--critic", str(tmp_path / "missing"), *ok], 66, "no file or folder"),
        (["--critic", str(link), *ok], 65, "is a symbolic link"),
        (["--critic", str(no_default), *ok], 65, "give the command after --"),
        ([*critic, *ok, "--runtime", "local"], 78, "not an image"),
        ([*critic, *ok, "--runtime", "nothing"], 78, "no runtime named 'nothing'"),
        ([*critic, *ok, "--base", str(tmp_path / "none.tar")], 66, "no file"),
        ([*critic, *ok, "--base", str(tmp_path)], 65, "is a folder"),
        ([*critic, *ok, "--base", str(not_tar)], 65, "is not a tar"),
        ([*critic, *ok, "--base", "Not/An:image:"], 65, "is not an image reference"),
        ([*critic, *ok, "--config", str(url)], 65, "url"),
    ]


@once_per_ci  # (what it refuses does not depend on the server's kind: 15 commands, ~30 s)
async def test_every_refusal_is_one_line_its_code_and_nothing_written(
        store: EventStore, dsn: str, tmp_path: Path) -> None:
    """Refused before the engine is asked anything: no image, no push, no definition."""
    for args, code, says in _refusals(tmp_path):
        out = await anyio.to_thread.run_sync(functools.partial(
            props, "definitions", "build", *args, dsn=dsn,
            env={"DOCKER_HOST": "unix:///nonexistent.sock"}))
        assert out.returncode == code, (args, out.stderr)
        assert says.lower() in out.stderr.lower() and "Traceback" not in out.stderr, \
            (args, out.stderr)
        if code != 2:  # (argparse's usage errors print the usage first)
            assert len(out.stderr.splitlines()) == 1, (args, out.stderr)
        assert out.stdout == "", (args, out.stdout)
    assert await definitions.all_pushed(store, "critic") == []
    assert await definitions.all_pushed(store, "grader") == []


def _default_base_or_skip() -> None:
    """The default base is cached, or can be made here (root, debootstrap, a mirror)."""
    why = portable_image.rootfs_missing()
    if why is None and not portable_image.ROOTFS_TAR.is_file():
        try:
            portable_image.mirror()
        except portable_image.BaseUnavailable as exc:
            why = str(exc)
    if why is not None:
        message = f"NORUN: no default base ({portable_image.ROOTFS_TAR} missing; {why})"
        if docker_required():
            pytest.fail(f"{message}; PROPS_REQUIRE_DOCKER=1 demands it")
        pytest.skip(message)


def _critic(folder: Path) -> Path:
    """The how-to's critic, run after MOUNTS says what the container sees."""
    folder.mkdir()
    shutil.copy(HOWTO_CRITIC, folder / "critic.py")
    (folder / "mounts.py").write_text(MOUNTS)
    (folder / "main.py").write_text(MAIN)
    return folder


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(900)  # the default base made first when missing: debootstrap, ~2 min
@once_per_ci  # (the image and its run do not depend on the server's kind)
async def test_a_built_image_runs_a_critic_without_the_hosts_python(
        store: EventStore, dsn: str, docker: DockerRuntime, tmp_path: Path) -> None:
    _default_base_or_skip()
    critic = _critic(tmp_path / "critic")
    repo = f"props-test/portable-{uuid.uuid4().hex[:8]}"
    env = {"PROPS_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    (tmp_path / "registry").mkdir()
    async with upstream_registry(tmp_path / "registry") as registry:
        address = registry.removeprefix("http://")
        built = await anyio.to_thread.run_sync(lambda: props(
            "definitions", "build", "--critic", str(critic), "--push", f"{address}/{repo}:1",
            "--name", "portable", "--", "python3", "/critic/main.py", dsn=dsn, env=env))
        assert built.returncode == 0, built.stdout + built.stderr
        pinned = re.search(rf"^pushed ({re.escape(address)}/{repo}@(sha256:[0-9a-f]{{64}}))$",
                           built.stdout, re.MULTILINE)
        assert pinned is not None, built.stdout
        # The registry holds the manifest under the digest the definition records.
        async with httpx.AsyncClient() as client:
            manifest = await client.get(
                f"{registry}/v2/{repo}/manifests/{pinned[2]}", headers={
                    "Accept": "application/vnd.docker.distribution.manifest.v2+json"})
        assert manifest.status_code == 200
        assert manifest.headers["docker-content-digest"] == pinned[2]
        [recorded] = await definitions.all_pushed(store, "critic")
        assert (recorded.name, recorded.tag, recorded.digest, recorded.image,
                recorded.runtime, recorded.host_python) == (
            "portable", "1", pinned[2], pinned[1], "docker", False)
        # The image's own check ran in it: its python imported the SDK and libpq.
        assert re.search(r"^built .*: python 3\.\d+\.\d+, psycopg \S+ \(libpq \d+\)",
                         built.stdout, re.MULTILINE), built.stdout
        await _evaluate_and_look_inside(store, dsn, tmp_path, env)
        # What the swarm runtime runs on a node: its end-marker wrapper, in the image's own
        # python3 (without a swarm here: the two-node rig is tests/test_swarm.py's).
        wrapped = await _run(docker, f"props-test-{uuid.uuid4().hex[:8]}", [], pinned[1],
                             ["python3", "-c", swarm_runtime.WRAPPER, "python3",
                              "/critic/mounts.py"])
        ended = swarm_runtime.ended_output(wrapped[1].encode())
        assert wrapped[0] == 0 and ended is not None and ended[0] == 0, wrapped
        assert b"python /usr/bin/python3 " in ended[1] and host_mounts(ended[1].decode()) == []
    # The image this test built goes (the base stays: it is the cached root filesystem's).
    await docker.docker.images.delete(f"{address}/{repo}:1", force=True)


async def _evaluate_and_look_inside(store: EventStore, dsn: str, tmp_path: Path,
                                    env: dict[str, str]) -> None:
    await sync_samples(store)
    plan = tmp_path / "plan.toml"
    plan.write_text('name = "portable"\nexamples = ["csvtool/*"]\n'
                    '[[critic]]\ndefinition = "portable"\n')
    done = await anyio.to_thread.run_sync(lambda: props(
        "eval", "run", str(plan), "--runtime", "docker", dsn=dsn, env=env))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "portable: complete: 1 scored" in done.stdout, done.stdout
    [run_id] = await store.pool.fetch(
        "SELECT DISTINCT data->>'run_id' FROM props.events WHERE type = 'run.started'")
    logs = await anyio.to_thread.run_sync(lambda: props("runs", "logs", run_id[0], dsn=dsn))
    assert logs.returncode == 0, logs.stderr
    # Inside the container: the image's own python3, and nothing of the host's system or
    # Python mounted (the example and the database's socket are, as for any run).
    assert re.search(r"^python /usr/bin/python3 3\.\d+\.\d+$", logs.stdout, re.MULTILINE), \
        logs.stdout
    assert host_mounts(logs.stdout) == [], logs.stdout
    assert "mount /example" in logs.stdout
    # Graded end to end: every issue the critic reported has its grade.
    issues = await store.pool.fetchval(
        "SELECT count(*) FROM props.events WHERE type = 'issue.reported'")
    graded = await store.pool.fetchval(
        "SELECT coalesce(sum(jsonb_array_length(data->'grades')), 0) FROM props.events "
        "WHERE type = 'grades.emitted'") + await store.pool.fetchval(
        "SELECT count(*) FROM props.events WHERE type = 'grade.emitted'")
    assert issues >= 2 and graded == issues, (issues, graded)


@pytest.mark.docker
async def test_the_check_sees_todays_image_and_its_mounts(
        docker: DockerRuntime, tmp_path: Path) -> None:
    """Negative controls: today's reference image runs only through its bind mounts of the
    host's system and Python, and the check above sees them; without them it cannot start
    its python."""
    folder = tmp_path / "critic"
    folder.mkdir()
    (folder / "mounts.py").write_text(MOUNTS)
    tag = uuid.uuid4().hex[:8]
    python = [Mount(p, p) for p in definitions.host_python_paths()]
    critic = Mount(str(folder), "/critic")
    with_mounts = await _run(docker, f"props-test-{tag}-m", [*python, critic])
    assert with_mounts[0] == 0, with_mounts
    found = host_mounts(with_mounts[1])
    assert "/usr" in found or any(p.startswith("/usr/") for p in found), with_mounts[1]
    without = await _run(docker, f"props-test-{tag}-n", [critic])
    assert without[0] != 0, without  # no python in the image itself


async def _run(docker: DockerRuntime, name: str, mounts: list[Mount], image: str = REFERENCE_IMAGE,
               command: list[str] | None = None) -> tuple[int | None, str]:
    spec = ContainerSpec(name=name, image=image,
                         command=command or [sys.executable, "/critic/mounts.py"],
                         mounts=mounts, labels={LABEL: str(uuid.uuid4()), "props.test": name})
    try:
        try:
            await docker.start(spec)
        except Exception as exc:  # (an engine that cannot exec the command refuses it)
            return 127, f"start refused: {exc}"
        outcome = await docker.wait(name, 60)
        assert outcome is not None
        return outcome.exit_code, (await docker.logs(name)).decode()
    finally:
        await docker.remove(name)


def test_the_image_carries_no_asyncpg_nor_the_rest_of_props() -> None:
    """What the SDK needs and nothing of props beside it."""
    names = {name.split("/")[0] for name, _ in portable_image.sdk_files()}
    tops = {n.split("-")[0].removesuffix(".py").removesuffix(".libs") for n in names}
    assert tops == {"props_agent", "psycopg", "psycopg_binary", "typing_extensions"}, names
    assert not any("asyncpg" in n or n.startswith("props/") for n in names)
    assert re.fullmatch(r"3\.\d+", portable_image.sdk_python())


@pytest.mark.docker
async def test_a_base_without_python_is_refused_and_nothing_is_pushed_or_recorded(
        store: EventStore, dsn: str, docker: DockerRuntime) -> None:
    """The image's own check refuses today's nearly empty image as a base, in one line."""
    target = f"localhost:1/props-test/nopython-{uuid.uuid4().hex[:8]}:1"
    out = await anyio.to_thread.run_sync(lambda: props(
        "definitions", "build", "--critic", str(HOWTO_CRITIC), "--push", target,
        "--base", REFERENCE_IMAGE, dsn=dsn))
    assert out.returncode == 65, out.stderr
    assert "the base has no python3" in out.stderr and len(out.stderr.splitlines()) == 1, \
        out.stderr
    assert await definitions.all_pushed(store, "critic") == []
    assert not await portable_image.has_image(docker.docker, target)
