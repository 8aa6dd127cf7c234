"""`props specimens ...`: validate, sync, list and show snapshots with their ground truth."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from props.core.domain import vocabulary
from props.tools.command_line import arguments

FORMAT_HELP = """\
DIR holds one folder per snapshot, PROJECT/YYYY-MM-DD-NN/, each with a code/ folder (the
snapshot's files) and a ground_truth.toml (true positives [[tp]], known false positives
[[fp]], [file_sets], optional [scopes]); see docs/reference/ground-truth-format.md. The
bundled samples are in the folder `props specimens samples` prints.
"""


def add_parser(sub: Any) -> None:
    sp = sub.add_parser("specimens", help="snapshots of code and their ground truth",
                        description="Validate specimen directories, record them in the log, "
                        "and look at what is recorded.")
    cmds = sp.add_subparsers(dest="specimens_command", metavar="ACTION", required=True)
    p = cmds.add_parser("validate", help="check a specimen directory; write nothing",
                        description="Check every snapshot under DIR and report every problem "
                        "with its file and line. Exit 65 if there is any.\n\n" + FORMAT_HELP)
    p.add_argument("dir", type=Path, help="a folder of specimens (one folder per snapshot)")
    _max_file_bytes(p)
    _allow_todo(p)
    p.set_defaults(handler="specimens:validate_cmd")
    p = cmds.add_parser("sync", help="record a specimen directory in the log",
                        description="Validate DIR, then record each snapshot as a version: "
                        "unchanged ones add nothing, changed ones add a version (the old one "
                        "stays), snapshots gone from DIR are retired. A ground truth with a TODO "
                        "left is refused (exit 65), as validate refuses it.\n\n" + FORMAT_HELP)
    p.add_argument("dir", type=Path, help="a folder of specimens (one folder per snapshot)")
    p.add_argument("--no-retire", action="store_true",
                   help="do not retire snapshots missing from DIR")
    _allow_todo(p)
    _max_file_bytes(p)
    p.set_defaults(handler="specimens:sync_cmd", connections=3)
    p = cmds.add_parser("list", help="recorded snapshots with versions and counts",
                        description="Every snapshot the log knows: latest version, status, and "
                        "counts of TPs, occurrences, FPs and file sets.")
    arguments.add_format(p)
    p.set_defaults(handler="specimens:list_cmd", connections=2)
    p = cmds.add_parser("show", help="one snapshot's versions and ground truth",
                        description="The versions of one snapshot and the ground truth of the "
                        "latest (or --version N).")
    p.add_argument("slug", help="PROJECT/YYYY-MM-DD-NN")
    p.add_argument("--version", type=int, help="a version number (default: the latest)")
    arguments.add_format(p, ("table", "json"))  # (JSON: the snapshot.synced event)
    p.set_defaults(handler="specimens:show_cmd", connections=2)
    _from_fixes(cmds)
    p = cmds.add_parser("samples", help="print the folder of the bundled sample specimens",
                        description="Print the folder holding the sample specimens shipped "
                        "with props, e.g. `props specimens sync \"$(props specimens samples)\"`.")
    p.set_defaults(handler="specimens:samples_cmd")


def _from_fixes(cmds: Any) -> None:
    """The commands that make a snapshot and its answer key from fixes: from-git, from-diff,
    from-dataset."""
    p = cmds.add_parser("from-git", help="a snapshot from bug-fix commits of a git repository",
                        description="Write OUT/SLUG/: the code before the fixes (the parent of "
                        "the oldest --fix) and a ground_truth.toml whose true positives are "
                        "the fixes' hunks on that code (deleted or changed lines; for a pure "
                        "insertion, the lines around it), with each commit's message as "
                        "rationale and a file set per fix (its files and their neighbours). "
                        "TODO comments mark what a person must check; then `props specimens "
                        "validate OUT` and `sync OUT`.")
    p.add_argument("repo", type=Path, help="a local git repository")
    p.add_argument("--fix", action="append", required=True, metavar="COMMIT",
                   help="a commit that fixes a defect (repeatable)")
    _defect_paths(p)
    _output(p)
    p.set_defaults(handler="specimens:from_git_cmd")
    p = cmds.add_parser("from-diff", help="a snapshot from a buggy and a fixed folder",
                        description="As from-git, for one fix given as two folders: BUGGY "
                        "becomes the snapshot, and what turns it into FIXED the defect.")
    p.add_argument("buggy", type=Path, help="the code with the defect")
    _defect_paths(p)
    p.add_argument("fixed", type=Path, help="the same code, fixed")
    p.add_argument("--id", default="fix", help="the true positive's id (default: fix)")
    p.add_argument("--rationale", default="", help="what the defect is")
    _output(p)
    p.set_defaults(handler="specimens:from_diff_cmd")
    p = cmds.add_parser(
        "from-dataset", help="snapshots from a bug dataset: BugsInPy, or SWE-bench JSONL",
        description="One snapshot per bug, as from-git makes one: the code at the buggy commit "
        "(BugsInPy's buggy_commit_id, SWE-bench's base_commit) and one true positive, the "
        "fix's hunks in source files (BugsInPy: its bug_patch.txt, or without one the diff to"
        " fixed_commit_id; SWE-bench: its patch; a test_patch is never ground truth), the "
        "problem statement or the fix's message as rationale, marked for review. A bug whose "
        "repository or commit is missing, or whose fix touches no source line, is listed and "
        "skipped, never half-written; a bug written before is not written again. Exit 0 when "
        "every selected bug was written, 3 when some were skipped.")
    p.add_argument("kind", choices=("bugsinpy", "swebench"), help="the dataset's format")
    p.add_argument("source", type=Path, metavar="SOURCE",
                   help="bugsinpy: the BugsInPy checkout (projects/NAME/bugs/N/bug.info); "
                   "swebench: the JSONL file (instance_id, repo, base_commit, patch, "
                   "problem_statement)")
    p.add_argument("--repos", type=Path, required=True, metavar="DIR",
                   help="local clones named as the dataset names them: DIR/PROJECT for "
                   "BugsInPy; DIR/OWNER/NAME, DIR/OWNER__NAME or DIR/NAME for SWE-bench")
    p.add_argument("-o", "--out", type=Path, required=True, metavar="DIR",
                   help="the specimens folder to write the snapshots into")
    p.add_argument("--limit", type=arguments.positive_int, metavar="N",
                   help="at most N bugs (after --only)")
    p.add_argument("--only", action="append", metavar="ID",
                   help="only this bug (repeatable): BugsInPy PROJECT-N, SWE-bench instance_id")
    _defect_paths(p)
    p.set_defaults(handler="specimens:from_dataset_cmd")


def _defect_paths(p: argparse.ArgumentParser) -> None:
    p.add_argument("--defect-paths", action="append", metavar="GLOB",
                   help="the paths whose hunks may be defect locations (repeatable; default: "
                   "every path but tests, docs and CI configuration, e.g. tests/**, "
                   "**/test_*.py, docs/**, *.md, .github/**); '**' for every path")
    p.add_argument("--include", action="append", metavar="GLOB",
                   help="only these files go into the snapshot (repeatable; default: every "
                   "text file within the size limit, tests included as context)")
    p.add_argument("--exclude", action="append", metavar="GLOB",
                   help="leave these files out of the snapshot (repeatable; CI configuration "
                   "such as .github/**, .gitlab-ci.yml and .circleci/** always is)")


def _output(p: argparse.ArgumentParser) -> None:
    p.add_argument("--slug", required=True, metavar="PROJECT/YYYY-MM-DD-NN",
                   help="the snapshot's name")
    p.add_argument("-o", "--out", type=Path, required=True, metavar="DIR",
                   help="the specimens folder to write the snapshot into (OUT/SLUG/)")


def _allow_todo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-todo", action="store_true",
                   help="accept a ground truth that still has TODO comments (a draft, e.g. "
                   "from from-git); by default each is a problem, so an unchecked key never "
                   "reaches sync by accident")


def _max_file_bytes(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-file-bytes", type=int, metavar="N",
                   default=vocabulary.MAX_SPECIMEN_FILE_BYTES,
                   help="refuse a snapshot file larger than N bytes (default: 1 MiB)")
