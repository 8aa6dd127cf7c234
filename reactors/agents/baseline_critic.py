"""Baseline critics: well-known static analyzers (ruff, bandit, pylint) run as critics.

`python -m props.reactors.agents.baseline_critic` inside a run's container, with the
definition's config `{"tool": NAME, "version": V, "rules": [...]}`. It runs the real tool
(installed with `props[baselines]`; nothing is fetched at run time) over the example's
Python files, read in place, and each finding becomes an issue: its file and lines, the
rule id, its category (`baselines.CATEGORIES`: style findings are never candidates for a
defect) and the tool's message as rationale, the tool's severity mapped onto props'. The
tool's configuration files in the example are ignored (a snapshot must not choose its own
rules). Findings outside the example's files are dropped and counted. The installed version
must be the one the definition names (its digest covers it): any other, or a tool that
crashes, ends the run with exit code 3, a closed failure fact.

The tool never runs the example's code and never reads props' files: how it runs (isolated,
behind an import guard, its import-executing features and the example's pragmas off, and as
user nobody on a copy of the example when props runs as root) is
`baseline_confinement`'s concern.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from props.core.domain import baselines, catalog
from props.core.log import errors
from props.reactors.agents import baseline_confinement
from props.reactors.agents.baseline_confinement import Confinement
from props.reactors.agents.sdk import Agent

TOOL_FAILED = 3  # the exit code of a run whose tool could not review the example

@dataclasses.dataclass(frozen=True)
class Finding:
    path: str  # as the tool wrote it
    start: int
    end: int
    rule: str
    message: str
    severity: catalog.Severity


@dataclasses.dataclass(frozen=True)
class Tool:
    """How to run one analyzer (with its rules, `baselines.RULES`) and read what it says."""

    arguments: Callable[[tuple[str, ...], list[str]], list[str]]
    findings: Callable[[Any], list[Finding]]
    ok_exits: frozenset[int]  # exit codes that mean "reviewed" (findings or none)


def _ruff(doc: Any) -> list[Finding]:
    return [Finding(f["filename"], f["location"]["row"], f["end_location"]["row"], f["code"]
                    or "syntax", f["message"], "high" if f["code"] is None or
                    f["code"].startswith(("F", "S")) else "low") for f in doc]


_BANDIT_SEVERITY: dict[str, catalog.Severity] = {"LOW": "low", "MEDIUM": "medium",
                                                  "HIGH": "high"}


def _bandit(doc: Any) -> list[Finding]:
    if doc.get("errors"):
        raise RuntimeError(f"bandit could not read {len(doc['errors'])} file(s)")
    return [Finding(r["filename"], min(r["line_range"] or [r["line_number"]]),
                    max(r["line_range"] or [r["line_number"]]), r["test_id"], r["issue_text"],
                    _BANDIT_SEVERITY.get(r["issue_severity"], "info")) for r in doc["results"]]


_PYLINT_SEVERITY: dict[str, catalog.Severity] = {
    "fatal": "critical", "error": "high", "warning": "medium", "refactor": "low",
    "convention": "info"}


def _pylint(doc: Any) -> list[Finding]:
    return [Finding(m["path"], m["line"], m.get("endLine") or m["line"],
                    f"{m['message-id']} {m['symbol']}", m["message"],
                    _PYLINT_SEVERITY.get(m["type"], "info")) for m in doc]


TOOLS: dict[str, Tool] = {
    "ruff": Tool(lambda rules, files: [
        "ruff", "check", "--isolated", "--no-cache", "--output-format", "json",
        "--exit-zero", "--ignore-noqa", "--select", ",".join(rules), *files], _ruff,
        frozenset({0})),
    # (bandit exits 1 when it found something)
    "bandit": Tool(lambda rules, files: [
        "bandit", "-f", "json", "-q", "--ignore-nosec", *files], _bandit, frozenset({0, 1})),
    # (pylint's exit status is a bit mask: 1 fatal, 32 usage error)
    "pylint": Tool(lambda rules, files: [
        "pylint", "--output-format=json", "--score=n", "--persistent=n",
        "--rcfile=/dev/null", "--unsafe-load-any-extension=n", "--load-plugins=",
        "--extension-pkg-allow-list=", "--disable=all", f"--enable={','.join(rules)}", *files],
        _pylint, frozenset(range(0, 32, 2))),
}


def review(tool: str, root: Path, files: list[str],
           confinement: Confinement | None = None) -> tuple[list[Finding], int]:
    """The findings on `files` (relative to `root`), and how many fell outside them."""
    t = TOOLS[tool]
    confinement = confinement or Confinement()
    read = baseline_confinement.inside(root.resolve(), files)
    if not read:  # (a tool given no file reviews its working directory: the filesystem)
        return [], len(files) - len(read)
    with baseline_confinement.readable_copy(root.resolve(), read, confinement) as folder:
        targets = [str(folder / f) for f in read]
        # The filesystem's root: outside the example, and there in every container (which
        # may have no writable folder at all; the tools write nothing: no cache, no state).
        done = subprocess.run(
            confinement.command(sys.executable, t.arguments(baselines.RULES[tool], targets)),
            cwd=os.sep, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.sep},
            capture_output=True, text=True, timeout=600, check=False)
        if done.returncode not in t.ok_exits:
            raise RuntimeError(f"{tool} exited {done.returncode}: "
                               f"{done.stderr.strip()[-2000:]}")
        kept, dropped = [], 0
        for f in t.findings(json.loads(done.stdout or "[]")):
            path = os.path.relpath(os.path.realpath(folder / f.path), os.path.realpath(folder))
            if path not in read:
                dropped += 1
                continue
            kept.append(dataclasses.replace(f, path=path))
    return kept, dropped


def main() -> int:
    with Agent.from_environment() as agent:
        wanted = agent.task.config
        tool = str(wanted.get("tool"))
        if tool not in TOOLS:
            print(f"unknown baseline tool {tool!r}; known: {', '.join(TOOLS)}", file=sys.stderr)
            return TOOL_FAILED
        try:
            here = baselines.config(tool)
        except errors.ConfigurationError as exc:  # not installed where the run runs
            print(exc, file=sys.stderr)
            return TOOL_FAILED
        if here != {k: wanted.get(k) for k in here}:
            print(f"the definition asks for {wanted}, this machine has {here}: push the "
                  f"baseline again (props definitions baseline {tool})", file=sys.stderr)
            return TOOL_FAILED
        agent.prompt(f"baseline critic: {tool} {here['version']}, rules "
                     f"{','.join(here['rules'])}", template="baseline")
        began = time.monotonic()
        files = sorted(p for p in agent.files() if p.endswith(".py"))
        try:
            findings, dropped = review(tool, agent.example_dir, files) if files else ([], 0)
        except (RuntimeError, ValueError, KeyError, subprocess.TimeoutExpired) as exc:
            print(f"{tool} could not review the example: {exc}", file=sys.stderr)
            return TOOL_FAILED
        for f in sorted(findings, key=lambda f: (f.path, f.start, f.rule)):
            # The rule first (what props.core.scoring.candidates reads), then its category.
            kind = baselines.category(tool, f.rule.split(" ", 1)[0])
            agent.issue(f.path, f.start, max(f.start, f.end),
                        f"[{f.rule}] ({kind}) {f.message}", f.severity)
        agent.phase("review", began)
        print(f"{tool} {here['version']} on {agent.task.example.snapshot}: {len(findings)} "
              f"issue(s); {dropped} finding(s) outside the example's files dropped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
