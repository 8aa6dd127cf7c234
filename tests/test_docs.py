"""The documentation runs as written.

Every shell block of README.md, docs/quickstart.md and every how-to (docs/howto/*.md) runs,
in the pages' order, in a shell of its own, against a database of the test's own
(`PROPS_DSN`) and a temporary `PROPS_HOME`, from a folder that holds what a clone's root holds
for them (`.venv`, `tools`, `docs`). The how-tos run after the quickstart, in one database, as
a new user goes on from it (the README's "where to go next" order), on the embedded server
only: minutes of CLI work that does not depend on the server's kind. Blocks run as a newcomer
types them: the venv is not on `PATH` (a bare `props` fails as it does for them), stdin is
empty, and whatever a block leaves running in the background (`props serve &`) is killed
with its process group. A block that cannot run here carries `<!-- not run: why -->` on the
line before it, and the test counts those per page; `<!-- doc-test: appends nothing -->`
checks that the block appended no event; `<!-- doc-test: after the install -->` runs what
follows the install (`python3 -m venv .venv && .venv/bin/pip install -e '.[...]' && `: the
test's own environment stands for it); a page's `127.0.0.1:8080` is a free port of the test's,
and its `"$PWD/.venv/` the test's environment (see VENV).
And every relative link of README.md and docs/ names a file (and a heading) that is there.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.conftest import once_per_ci

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(\S*)\s*$")
MARKER = re.compile(r"^<!--\s*(not run|doc-test):\s*(.+?)\s*-->$")
INSTALL = re.compile(r"^python3 -m venv \.venv && \.venv/bin/pip install -e '\.\[[a-z,]+\]' && ")
SHELLS = {"sh", "bash", "shell"}
# The blocks each run page may leave unrun, each with its reason on the page: a new one
# must be counted here, so a page cannot drift into prose nobody runs.
NOT_RUN = {
    "README.md": 3, "docs/quickstart.md": 1,
    "docs/howto/llm-critic.md": 1, "docs/howto/variant.md": 1,
    "docs/howto/ground-truth.md": 2, "docs/howto/write-a-critic.md": 3,
    "docs/howto/scorer.md": 2, "docs/howto/results.md": 1, "docs/howto/export.md": 1,
    "docs/howto/service.md": 0, "docs/howto/serve.md": 0, "docs/howto/several-hosts.md": 10,
    "docs/howto/add-a-runtime.md": 0, "docs/howto/local-model.md": 2,
}
# Each walk is one database: the README alone, then the quickstart and every how-to after it
# (what the quickstart recorded is what the how-tos work on).
HOWTOS = ["docs/howto/llm-critic.md", "docs/howto/variant.md", "docs/howto/ground-truth.md",
          "docs/howto/write-a-critic.md", "docs/howto/scorer.md", "docs/howto/results.md",
          "docs/howto/export.md", "docs/howto/service.md", "docs/howto/serve.md",
          "docs/howto/several-hosts.md", "docs/howto/add-a-runtime.md",
          "docs/howto/local-model.md"]
WALKS = {"README.md": ["README.md"], "docs/quickstart.md": ["docs/quickstart.md"],
         "docs/howto": ["docs/quickstart.md", *HOWTOS]}
# The how-tos add minutes of CLI work that does not depend on the server's kind: they walk on
# the embedded server only, and there the quickstart is walked once, as their first page.
WALK_MARKS = {
    "README.md": (),
    "docs/quickstart.md": (pytest.mark.skipif(
        not os.environ.get("PROPS_TEST_DSN"),
        reason="NORUN here: on the embedded server the how-to walk (docs/howto) walks the "
               "quickstart first"),),
    "docs/howto": (once_per_ci,),
}
PORT = "127.0.0.1:8080"  # the pages' address for a service: a free port of the test's
# props runs its own modules locally only with its own interpreter, named by its exact path
# (unresolved: a venv's python is a link out of the venv). The clone's `.venv` is a link to the
# test's environment, so a page's `$PWD/.venv` is written as that environment's own path.
VENV = '"$PWD/.venv/'


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    marker: tuple[str, str] | None  # ("not run" | "doc-test", what it says)


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, each with the marker comment just above it."""
    found: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        above = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(above.strip())
        found.append(Block(i + 1, opening.group(1), "\n".join(lines[i + 1:end]) + "\n",
                           (marker.group(1), marker.group(2)) if marker else None))
        i = end + 1
    return found


def script_of(block: Block) -> str | None:
    """What the test runs of a shell block: None for a block marked not run."""
    kind, note = block.marker or ("", "")
    if kind == "not run":
        return None
    if kind == "doc-test" and note == "after the install":
        stripped = INSTALL.sub("", block.text, count=1)
        assert stripped != block.text, f"line {block.line}: no install to leave out"
        return stripped
    assert kind == "" or note == "appends nothing", f"line {block.line}: unknown {note!r}"
    return block.text


def event_count(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM props.events").fetchone()
    assert row is not None
    return int(row[0])


def clone_root(tmp: Path) -> Path:
    """A working folder that holds what the pages name from a clone's root: `.venv` (the
    environment running the tests), `tools` (the bundled plans) and `docs` (the how-to's
    critic); what the blocks write lands here, not in the repository."""
    work = tmp / "clone"
    work.mkdir()
    (work / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    (work / "tools").symlink_to(ROOT / "tools", target_is_directory=True)
    shutil.copytree(ROOT / "docs", work / "docs")  # a block may write beside a page's files
    return work


def newcomer_env(dsn: str, home: Path) -> dict[str, str]:
    """The environment of a new user's shell: the test's database and home, 80 columns, and
    no venv on PATH (the pages say `.venv/bin/props`; a bare `props` is not found)."""
    venv_bin = str(Path(sys.prefix) / "bin")
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and Path(p).resolve() != Path(venv_bin).resolve()]
    env = {**os.environ, "PROPS_DSN": dsn, "PROPS_HOME": str(home), "COLUMNS": "80",
           "PATH": os.pathsep.join(path)}
    for name in ("PROPS_TEST_DSN", "VIRTUAL_ENV"):
        env.pop(name, None)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def run_block(script: str, work: Path, env: dict[str, str], timeout: float = 600) -> Ran:
    """One block in `bash -e -o pipefail`, its own process group, stdin empty; output to files
    (a background child holding a pipe would keep a reader waiting), and whatever it left
    running killed with its group once bash is done."""
    began = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        shell = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", script], cwd=work,
                                 env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                 text=True, start_new_session=True)
        try:
            code = shell.wait(timeout)
        except subprocess.TimeoutExpired:
            code = -1
        finally:
            try:
                os.killpg(shell.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            shell.wait()
        out.seek(0)
        err.seek(0)
        return Ran(code, out.read(), err.read(), time.monotonic() - began)


def walk_page(page: str, text: str, dsn: str, work: Path, env: dict[str, str]) -> int:
    """Runs every shell block of one page in order; fails on the first that exits non-zero
    (naming the page and line), or that appended events where it says it appends nothing.
    Returns how many blocks it left unrun."""
    shell = [b for b in blocks(text) if b.language in SHELLS]
    port = str(free_port())
    unrun = 0
    for block in shell:
        script = script_of(block)
        if script is None:
            unrun += 1
            continue
        script = script.replace(PORT, f"127.0.0.1:{port}").replace(VENV, f'"{sys.prefix}/')
        before = event_count(dsn) if block.marker == ("doc-test", "appends nothing") else None
        out = run_block(script, work, env)
        assert out.returncode == 0, (
            f"{page}:{block.line} exited {out.returncode}\n{script}\n{out.stdout[-3000:]}\n"
            f"{out.stderr[-3000:]}")
        if before is not None:
            assert event_count(dsn) == before, f"{page}:{block.line} appended events"
        print(f"{page}:{block.line} ran in {out.seconds:.1f} s")  # shown with -s or on failure
    return unrun


def test_every_howto_is_walked() -> None:
    """A how-to added to docs/howto/ joins a walk and the counts, or this fails."""
    howtos = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs" / "howto").glob("*.md"))
    assert sorted(HOWTOS) == howtos
    assert sorted({page for pages in WALKS.values() for page in pages}) == sorted(NOT_RUN)
    assert WALKS["docs/howto"] == [*WALKS["docs/quickstart.md"], *HOWTOS]


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("walk", [pytest.param(w, marks=WALK_MARKS[w]) for w in sorted(WALKS)])
def test_every_shell_block_runs(walk: str, dsn: str, tmp_path: Path) -> None:
    from props.projections.engine import ANALYST_ROLE
    from tests.conftest import TEST_ROLE_PASSWORD, as_role

    work = clone_root(tmp_path)
    # The test's server asks every role for a password, as a server of the user's own does
    # (results.md says so): the analyst gets one, given as that page says, in PGPASSWORD.
    as_role(dsn, ANALYST_ROLE)
    env = {**newcomer_env(dsn, tmp_path / "home"), "PGPASSWORD": TEST_ROLE_PASSWORD}
    ran = 0
    for page in WALKS[walk]:
        text = (ROOT / page).read_text()
        unrun = walk_page(page, text, dsn, work, env)
        shell = [b for b in blocks(text) if b.language in SHELLS]
        assert unrun == NOT_RUN[page], f"{page}: {unrun} blocks not run"
        ran += len(shell) - unrun
    assert ran >= 3


def test_a_documented_command_that_breaks_fails_the_walk(dsn: str, tmp_path: Path) -> None:
    """Negative controls of the walk itself, on temporary copies of a how-to: a flag the
    command does not have, and a bare `props` (not the venv's), each fail at their line;
    the page as written passes its first block. (On main before this walk, the how-tos'
    first failure was that bare `props`: docs/howto/ground-truth.md:16, exit 127.)"""
    page = "docs/howto/variant.md"
    text = (ROOT / page).read_text()
    first = next(b for b in blocks(text) if b.language in SHELLS)
    assert "--config lite.toml" in first.text and ".venv/bin/props definitions" in first.text
    work = clone_root(tmp_path)
    env = newcomer_env(dsn, tmp_path / "home")
    head = text[:text.index(first.text) + len(first.text)] + "```\n"  # the first block only
    assert walk_page(page, head, dsn, work, env) == 0
    for broken, says in ((head.replace("--config lite.toml", "--confg lite.toml"),
                          "unrecognized arguments: --confg"),
                         (head.replace(".venv/bin/props definitions", "props definitions"),
                          "props: command not found")):
        with pytest.raises(AssertionError, match=f"{page}:{first.line} exited") as failed:
            walk_page(page, broken, dsn, work, env)
        assert says in str(failed.value)


def test_markers_are_read_as_written() -> None:
    """The parser's own negative controls: a marker is taken from the line above a block
    only, an unknown doc-test marker fails, and an install that is not there fails."""
    text = ("<!-- not run: a reason -->\n```sh\nfalse\n```\n\nprose\n```sh\ntrue\n```\n"
            "<!-- doc-test: after the install -->\n```sh\n.venv/bin/props demo\n```\n")
    first, second, third = blocks(text)
    assert first.marker == ("not run", "a reason") and script_of(first) is None
    assert second.marker is None and script_of(second) == "true\n"
    with pytest.raises(AssertionError, match="no install"):
        script_of(third)
    install = Block(1, "sh", "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && "
                             ".venv/bin/props demo\n", ("doc-test", "after the install"))
    assert script_of(install) == ".venv/bin/props demo\n"
    with pytest.raises(AssertionError, match="unknown"):
        script_of(Block(1, "sh", "true\n", ("doc-test", "appends everything")))


# -- links -----------------------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
# Pages other branches of this release write; a link to one is allowed while it is missing
# (merged, they resolve like any other). Empty this once they are all in.
PENDING: set[str] = set()  # pages other work writes, linked before they land


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces
    to `-`."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    return {anchor(h) for h in re.findall(r"^#+\s+(.*)$", text, flags=re.M)}


def broken_links(page: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        relative = where.relative_to(ROOT).as_posix() if where.is_relative_to(ROOT) else ""
        if not where.exists():
            if relative not in PENDING:
                broken.append(target)
        elif fragment and where.suffix == ".md" and fragment not in anchors(where):
            broken.append(target)
    return broken


def test_every_relative_link_resolves() -> None:
    found = {p.relative_to(ROOT).as_posix(): broken_links(p) for p in pages()}
    assert len(found) > 20
    assert {page: links for page, links in found.items() if links} == {}


def test_a_broken_link_is_reported(tmp_path: Path) -> None:
    """Negative control: a missing file, a missing heading and a link inside a code block
    (not a link) are told apart."""
    (tmp_path / "there.md").write_text("# A heading, here\n")
    page = tmp_path / "page.md"
    page.write_text("[a](there.md) [b](there.md#a-heading-here) [c](gone.md) "
                    "[d](there.md#nowhere) [e](https://example.org/x)\n```\n[f](gone2.md)\n```\n")
    assert broken_links(page) == ["gone.md", "there.md#nowhere"]
