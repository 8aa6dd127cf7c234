"""`props definitions ...` and `props runs ...`: agent images, and critic runs on examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from props.core.domain import vocabulary
from props.tools.command_line import arguments

# The bounds of props.reactors.runtimes.portable_image (a test holds them equal): this module
# loads with every command, the image builder only with `props definitions build`.
MAX_CRITIC_FILES = 5000
MAX_CRITIC_MIB = 64


def add_parsers(sub: Any) -> None:
    _definitions_parser(sub)
    _runs_parser(sub)


def _definitions_parser(sub: Any) -> None:
    d = sub.add_parser("definitions", help="agent images (critics, graders): build, push, "
                       "list",
                       description="A definition is an agent image recorded by its digest. "
                       "Runs name a definition and `latest`, a tag or a digest; the digest "
                       "actually used is recorded on the run.")
    cmds = d.add_subparsers(dest="definitions_command", metavar="ACTION", required=True)
    p = cmds.add_parser("push", help="record an image (or a local command) as a definition",
                        description="Record IMAGE (already on the Docker engine) under NAME:TAG "
                        "with the digest the engine reports, or with --local a command run "
                        "on the host (its digest covers the command, the config and the "
                        "module's source). A local command runs only if it is one of props' "
                        "own modules run by props' interpreter, or under `props serve "
                        "--trust-local-commands`; a variant of the reference critic is "
                        "`props definitions reference --name N --config FILE`.")
    p.add_argument("--type", choices=("critic", "grader"), required=True, dest="agent_type",
                   help="what the agent does: review code, or grade reviews")
    p.add_argument("--image", required=True, help="the image reference (or a label, --local)")
    p.add_argument("--name", help="definition name (default: the image name)")
    p.add_argument("--tag", default="latest", help="tag (default: latest)")
    p.add_argument("--config", type=Path, metavar="FILE",
                   help="JSON or TOML given to the agent as its config")
    p.add_argument("--local", action="store_true", help="a local command, not a Docker image")
    p.add_argument("--host-python", action="store_true",
                   help="mount the host's Python and props read-only into the container")
    p.add_argument("--network", action="store_true", help="give runs network access")
    p.add_argument("--memory-mb", type=int, default=512, help="memory limit (default 512)")
    p.add_argument("--cpus", type=float, default=1.0, help="CPU limit (default 1)")
    p.add_argument("--max-events", type=int, metavar="N",
                   help=f"cap on the events a run may report, granted with the push "
                   f"(default: the operator's grant, else {vocabulary.DEFAULT_MAX_EVENTS:,})")
    p.add_argument("command", nargs="*", help="the command to run (after --)")
    p.set_defaults(handler="runs:push_cmd", connections=2)
    p = cmds.add_parser("reference", help="push the bundled reference critic (or grader)",
                        description="Push the deterministic reference critic (static checks "
                        "of Python files, no network) as definition `reference`: a local "
                        "command, or with --docker a small image made with `docker import`. "
                        "With --grader, the reference grader (the tiered scorer in a "
                        "container) as `reference-grader`, a local command. --name and "
                        "--config make a variant: a second critic (a second \"model\") "
                        "that runs only the checks its config names.",
                        epilog="The checks (config.checks: a list of these names; default "
                        "every one):\n" + "".join(f"  {c}\n" for c in vocabulary.REFERENCE_CHECKS)
                        + "\nFor example, a file lite.toml holding\n"
                        '  checks = ["bare-except", "mutable-default"]\n'
                        "then: props definitions reference --name lite --config lite.toml")
    p.add_argument("--docker", action="store_true", help="build and push it as a Docker image")
    p.add_argument("--grader", action="store_true", help="the reference grader instead")
    p.add_argument("--name", type=arguments.name,
                   help="definition name (default: reference, or reference-grader)")
    p.add_argument("--tag", type=arguments.name, help="tag (default: local, or the image's)")
    p.add_argument("--config", type=Path, metavar="FILE",
                   help="JSON or TOML given to the critic as its config: `checks`, a list "
                   "of the check names below")
    p.set_defaults(handler="runs:reference_cmd", connections=2)
    p = cmds.add_parser("baseline", help="push a static analyzer (ruff, bandit, pylint) as a "
                        "critic", description="Push a well-known static analyzer as critic "
                        "definition `baseline-TOOL`: the real tool (from `props[baselines]`) "
                        "runs over the example's Python files and each finding becomes an "
                        "issue (its rule id and message as rationale, its severity mapped). "
                        "The tool's exact version and rules are in the definition's config "
                        "and digest. The reference image with the host's Python mounted "
                        "whenever a Docker engine answers (the tool's imports run in a "
                        "container, away from props' files), else a local command (said "
                        "when it happens).")
    p.add_argument("tool", choices=("ruff", "bandit", "pylint"), help="which analyzer")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--docker", action="store_true",
                       help="a Docker container or nothing: fail when no engine answers")
    where.add_argument("--local", action="store_true",
                       help="a local command even when an engine answers (it runs as user "
                       "nobody when props serves as root)")
    p.set_defaults(handler="runs:baseline_cmd", connections=2)
    p = cmds.add_parser("list", help="every definition pushed")
    arguments.add_format(p)
    p.set_defaults(handler="runs:list_definitions_cmd", connections=2)
    _build_parser(cmds)
    _grant_parser(cmds)


BUILD_EPILOG = """\
For example, the how-to's critic (docs/howto/write-a-critic.md), to a registry on this
machine (docs/howto/several-hosts.md starts one):
  props definitions build --critic docs/howto/critic \\
      --push localhost:5000/critics/my-critic:1
It prints the image by digest (localhost:5000/critics/my-critic@sha256:...) and records
critic my-critic:1 with that digest, for the docker runtime. For a Docker Swarm, a registry
every node reaches, and the swarm runtime; a script and its own command:
  props definitions build --critic review.py --runtime swarm \\
      --push registry.example:5000/review:2 \\
      -- python3 /critic/review.py --strict

In the image: /opt/props-agent (the SDK, `import props_agent`, and psycopg, copied from
props' own environment; on PYTHONPATH), /critic (the critic's files), CMD the command.
The base must have python3 on its PATH, of the version props' psycopg is built for (the
build checks it in the image: with no network, pulling nothing). The default base is
Debian bookworm's minbase with python3, made once with debootstrap (root; about 2
minutes, from DEBIAN_MIRROR or the Debian mirror apt uses) and kept as
  ~/.cache/props/swarm/rootfs-bookworm-python3.tar

Exit codes: 0 built, pushed and recorded; 2 an argument refused (nothing done); 65 the
critic's files or the base refused (a symbolic link, too large, the wrong Python); 66 no
such file; 69 no Docker engine, no base, or the registry did not take the image (nothing
recorded); 78 a config that cannot be read, or a runtime that runs no image."""


def _build_parser(cmds: Any) -> None:
    p = cmds.add_parser(
        "build", help="build a portable critic image, push it to a registry, record it",
        description="Build a critic image that carries what it runs (its python3, props' "
        "agent SDK and psycopg, the critic's own files) on a base you name, push it to the "
        "registry you name, and record the definition by the digest the registry answered. "
        "Unlike the reference image, which mounts this host's Python, it runs on any host "
        "that can pull it: the hosts of several launchers, or every node of a Docker Swarm "
        "(docs/howto/several-hosts.md). Nothing is pushed or recorded when an argument is "
        "refused, and nothing is recorded when the push fails.",
        epilog=BUILD_EPILOG)
    p.add_argument("--critic", type=Path, required=True, metavar="PATH",
                   help="the critic's script, or the folder of its files (copied to "
                   f"/critic; at most {MAX_CRITIC_FILES:,} files of "
                   f"{MAX_CRITIC_MIB} MiB, no symbolic links)")
    p.add_argument("--push", type=arguments.push_target, required=True,
                   metavar="REGISTRY/REPOSITORY:TAG",
                   help="where the image goes: a registry every host that runs it can pull "
                   "from (localhost:5000/critics/mine:1)")
    p.add_argument("--base", type=arguments.base_source, metavar="IMAGE|FILE.tar",
                   help="what the image starts from: an image on the Docker engine with "
                   "python3, or a root filesystem as a tar (default: Debian bookworm's "
                   "minbase with python3, made when missing)")
    p.add_argument("--type", choices=("critic", "grader"), default="critic",
                   dest="agent_type", help="critic (default) or grader")
    p.add_argument("--name", type=arguments.name,
                   help="definition name (default: the repository's last part)")
    p.add_argument("--tag", type=arguments.name, help="definition tag (default: the push's)")
    p.add_argument("--runtime", type=arguments.runtime_name, default="docker", metavar="NAME",
                   help="what runs it: docker (default: a Docker or Podman engine, which "
                   "pulls it by digest) or swarm (jobs on a Docker Swarm), or another "
                   "registered container runtime")
    p.add_argument("--config", type=Path, metavar="FILE",
                   help="JSON or TOML given to the agent as its config")
    p.add_argument("--network", action="store_true", help="give runs network access")
    p.add_argument("--memory-mb", type=int, default=512, help="memory limit (default 512)")
    p.add_argument("--cpus", type=float, default=1.0, help="CPU limit (default 1)")
    p.add_argument("--max-events", type=int, metavar="N",
                   help="cap on the events a run may report, granted with the push")
    p.add_argument("command", nargs="*",
                   help="the command to run (after --; default: python3 /critic/FILE for a "
                   "script, python3 /critic/critic.py for a folder that has one)")
    p.set_defaults(handler="images:build_cmd", connections=2)


def _grant_parser(cmds: Any) -> None:
    p = cmds.add_parser(
        "grant", help="let runs of a definition have network, the host's Python, endpoints, "
        "caps",
        description="What an image's labels or a pushed config ask for is never granted by "
        "the push itself when it comes through the registry proxy: the operator grants it "
        "here, to one digest. A grant replaces the digest's earlier grant (a grant of "
        "nothing revokes, and its caps go back to the defaults). Your own `props "
        "definitions push` grants what it asks. The caps bound what one run's agent "
        f"reports (default {vocabulary.DEFAULT_MAX_EVENTS:,} events, "
        f"{vocabulary.DEFAULT_MAX_BYTES // 2**20:,} MiB of events and blobs); a run that reaches "
        "one fails `event_cap`. A plan may set another cap for one critic ([[critic]] "
        "max_events, max_bytes) up to the ceilings (default "
        f"{vocabulary.DEFAULT_CEILING_EVENTS:,} events, "
        f"{vocabulary.DEFAULT_CEILING_BYTES // 2**20:,} MiB).",
        epilog="For example:\n"
        "  props definitions grant my-llm-critic@v2 --endpoint openai\n"
        "  props definitions grant baseline-ruff --max-events 300000 \\\n"
        "      --ceiling-events 500000\n"
        "  props definitions grant untrusted@latest      (revokes everything)")
    p.add_argument("definition", metavar="NAME[@REF]",
                   help="the definition, at `latest` (the default), a tag or a digest")
    p.add_argument("--type", choices=("critic", "grader"), default="critic",
                   dest="agent_type", help="critic (default) or grader")
    p.add_argument("--network", action="store_true", help="give its runs network access")
    p.add_argument("--host-python", action="store_true",
                   help="mount the host's Python and props read-only into its containers")
    p.add_argument("--endpoint", action="append", metavar="NAME",
                   help="a registered endpoint its runs may call through the gateway "
                   "(repeat for more)")
    for unit, what, cap, ceiling in (
            ("events", "events", vocabulary.DEFAULT_MAX_EVENTS,
             vocabulary.DEFAULT_CEILING_EVENTS),
            ("bytes", "bytes of events and blobs", vocabulary.DEFAULT_MAX_BYTES,
             vocabulary.DEFAULT_CEILING_BYTES)):
        p.add_argument(f"--max-{unit}", type=int, metavar="N",
                       help=f"cap on the {what} one run may report (default {cap:,})")
        p.add_argument(f"--ceiling-{unit}", type=int, metavar="N",
                       help=f"the most {unit} a plan may raise a run's cap to (default "
                       f"{ceiling:,}, or --max-{unit} if higher)")
    p.add_argument("--reason", help="why, recorded with the grant")
    p.set_defaults(handler="endpoints:grant_cmd", connections=2)


def _runs_parser(sub: Any) -> None:
    r = sub.add_parser("runs", help="critic runs: request, list, show, cancel",
                       description="A critic run is one definition on one example with one "
                       "model, a timeout and a budget. `props serve` carries it out.")
    cmds = r.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    p = cmds.add_parser("request", help="request critic runs on an example")
    p.add_argument("--definition", required=True, metavar="NAME[@REF]",
                   help="definition name, optionally @tag or @sha256:... (default @latest)")
    p.add_argument("--snapshot", required=True, help="snapshot slug, e.g. csvtool/2025-09-03-00")
    p.add_argument("--file-set", metavar="NAME", help="review only this file set")
    p.add_argument("--model", type=arguments.name,
                   help="the model the critic uses (default: the definition's name: a "
                   "baseline's tool and version are its model, as in an evaluation's plan)")
    p.add_argument("--timeout", type=float, default=600, help="seconds (default 600)")
    p.add_argument("--budget", type=float, default=1.0, help="USD (default 1.0)")
    p.add_argument("--count", type=arguments.positive_int, default=1,
                   help="how many runs (default 1)")
    p.set_defaults(handler="runs:request_cmd", connections=2)
    p = cmds.add_parser("list", help="runs, their status, issues and scores",
                        description="The newest runs first, as the projections have them "
                        "(a run requested a moment ago shows once the projection runner of "
                        "`props serve` or `props projections run` has folded it): each with "
                        "the issues it reported and its recall and precision under the "
                        "active scorer.")
    p.add_argument("--status", choices=vocabulary.RUN_STATUSES, metavar="STATUS",
                   help=f"only runs in this status: {', '.join(vocabulary.RUN_STATUSES)}")
    p.add_argument("--model", type=arguments.name, help="only runs of this model")
    p.add_argument("--definition", type=arguments.name,
                   help="only runs of this critic definition")
    p.add_argument("--snapshot", type=arguments.name, help="only runs on this snapshot")
    p.add_argument("--limit", type=arguments.limit(10_000), default=50,
                   help="at most this many runs, up to 10,000 (default 50)")
    arguments.add_format(p)
    p.set_defaults(handler="runs:list_runs_cmd", connections=2)
    p = cmds.add_parser("show", help="a run's timeline, from the log",
                        description="Every event of the run in order, from the log (so a run "
                        "the projections have not caught up with shows too).")
    _run_id(p)
    arguments.add_format(p)
    p.set_defaults(handler="runs:show_cmd", connections=2)
    p = cmds.add_parser("logs", help="a run's container output, as stored",
                        description="Print what the run's container wrote (stdout and "
                        "stderr, as the launcher stored it when the container exited), for "
                        "any runtime: Docker, Podman, Swarm or local processes. It is text: "
                        "characters that would act on the terminal are shown as escapes "
                        "(\\x1b). Exit 66 when no container of the run has exited yet.")
    _run_id(p)
    p.add_argument("--tail", type=arguments.limit(1_000_000), metavar="N",
                   help="only the last N lines")
    p.set_defaults(handler="runs:logs_cmd", connections=2)
    p = cmds.add_parser("cancel", help="cancel a run (queued or running)")
    _run_id(p)
    p.set_defaults(handler="runs:cancel_cmd", connections=2)
    p = cmds.add_parser("hold", help="keep a run's events hot (props archive skips them)",
                        description="A retention hold: every partition holding an event of "
                        "the run stays in the table until the hold is released.")
    _run_id(p)
    p.add_argument("--reason", required=True, help="why, for whoever reads the archive's "
                   "output")
    p.set_defaults(handler="runs:hold_cmd", connections=2)
    p = cmds.add_parser("release", help="release a run's retention hold")
    _run_id(p)
    p.set_defaults(handler="runs:release_cmd", connections=2)


def _run_id(p: Any) -> None:
    p.add_argument("run_id", type=arguments.run_ref,
                   help="the run's id, or a unique prefix of it (tables show 8 digits)")
