"""`props`: the command line. Each sub-command lives in its own module; this one wires them.

Errors that props raises on purpose (`PropsError`), and the conditions a user meets in the
ordinary course (a table not built yet, a role without the privilege, a file that is not
there, a pipe closed by `head`), print one line saying what happened and what to do, and exit
with a documented code; anything else is a bug: a traceback, and a line saying so (exit 70).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import importlib
import logging
import os
import sys
import textwrap
import traceback
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import anyio

from props.core.log import errors

if TYPE_CHECKING:
    from props.core.log.stopping import Stop

# Which module holds each command's parser, in the order `props --help` lists them. A command
# imports its own parser module only (they import nothing heavy), and its handler's module
# once its arguments parsed: `props runs list --help` pays for neither the catalog nor the
# driver (every command took 1.3-2.5 s to start when cli imported them all).
COMMANDS: dict[str, str] = {
    "db": "commands.db", "events": "commands.events", "specimens": "commands.specimens",
    "projections": "commands.projections", "report": "commands.report",
    "review": "commands.review", "scorers": "commands.scoring", "rescore": "commands.scoring",
    "compare": "commands.scoring", "export": "commands.archive", "import": "commands.archive",
    "verify": "commands.archive", "archive": "commands.archive", "serve": "commands.service",
    "reactors": "commands.service", "view": "commands.view", "definitions": "commands.runs",
    "runs": "commands.runs", "endpoints": "commands.endpoints",
    "tokens": "commands.tokens", "keys": "commands.keys", "demo": "commands.demo",
    "bench": "commands.bench", "chaos": "commands.chaos", "eval": "commands.evaluations",
}

# A command that reads or writes the log declares so in its parser (`connections=N`, and
# `owner=True` for what only the owner's role may do) and its handler takes the store, which
# `main` opens once for it (procrastinate's `execute_command` shape); the others (the
# services, `db`, `demo`, `bench`, files only) take the arguments alone and open what they use.
Handler = Callable[[argparse.Namespace], Awaitable[int]]
StoreHandler = Callable[[argparse.Namespace, Any], Awaitable[int]]

DESCRIPTION = """\
props evaluates code-review agents on an event-sourced PostgreSQL log.

Every action is an event appended to one table; everything else is derived from it.
Database: PROPS_DSN if set, else an embedded PostgreSQL under PROPS_HOME
(default ~/.local/share/props), started on first use and kept running (`props db stop`).
"""


EX_SOFTWARE = 70  # a bug in props
EX_NOINPUT = 66
EX_NOPERM = 77
EX_SIGPIPE = 128 + 13  # what a shell shows for a program whose reader went away
EX_INTERRUPTED = 128 + 2  # ... for one stopped by Ctrl-C (SIGINT)
EX_TERMINATED = 128 + 15  # ... and by SIGTERM


class ParagraphHelp(argparse.HelpFormatter):
    """Help that wraps at the terminal's width, keeping the text's paragraphs (a blank line)
    and its indented lines (an example, a literal) as written: argparse's default joins the
    paragraphs, and its raw formatter kept a text pre-wrapped at 90 columns, split anew by
    an 80-column terminal."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out: list[str] = []
        prose: list[str] = []

        def flush() -> None:
            if prose:
                out.append(textwrap.fill(" ".join(prose), width, initial_indent=indent,
                                         subsequent_indent=indent))
                prose.clear()

        for line in text.splitlines():
            if not line.strip():
                flush()
                out.append("")
            elif line[0].isspace():
                flush()
                out.append(indent + line)
            else:
                prose.append(line.strip())
        flush()
        return "\n".join(out)


class _Commands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Sub-commands that take `-v` where they stand, and say which parser they are (so an
    unknown flag is reported by the command's own usage, not the top level's)."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs.setdefault("formatter_class", ParagraphHelp)
        if "help" in kwargs:  # `props X --help` says at least what the listing says
            kwargs.setdefault("description", kwargs["help"][:1].upper() + kwargs["help"][1:]
                              + ".")
        parser: argparse.ArgumentParser = super().add_parser(name, **kwargs)
        parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                            help="log what props is doing")
        parser.set_defaults(command_parser=parser)
        return parser


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Commands)


class _Version(argparse.Action):
    """`--version`, without reading the package metadata unless asked (45 ms)."""

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kwargs: Any) -> None:
        _say_version()
        parser.exit()


def _say_version() -> None:
    print(f"props {version()}")


def version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("props")
    except importlib.metadata.PackageNotFoundError:  # run from a tree that is not installed
        return "unknown"


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line; with `command`, only that command's module is imported and added
    (all of them for `props --help` or a word that is no command, which argparse reports)."""
    parser = _Parser(prog="props", description=DESCRIPTION, formatter_class=ParagraphHelp)
    parser.add_argument("-v", "--verbose", action="store_true", help="log what props is doing")
    parser.add_argument("--version", action=_Version, nargs=0, help="say which props this is")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    wanted = COMMANDS if command not in COMMANDS else {command: COMMANDS[command]}
    for module in dict.fromkeys(wanted.values()):  # each module once, in the listed order
        found = importlib.import_module(f"props.tools.command_line.{module}")
        adder = getattr(found, "add_parsers", None) or found.add_parser
        adder(sub)
    return parser


def handler_of(name: str) -> Handler | StoreHandler:
    """The handler a parser names as "module:function" (a module of
    props.tools.command_line.handlers, or one named whole from `props.`): its module is
    imported only now, once the arguments parsed (`props X --help` never loads what X
    does)."""
    module, _, function = name.partition(":")
    if not module.startswith("props."):
        module = f"props.tools.command_line.handlers.{module}"
    found: Handler | StoreHandler = getattr(importlib.import_module(module), function)
    return found


@dataclasses.dataclass
class _Stopped:
    """Which signal cancelled the command, if one did; what its stop's deadline cut."""

    stop: Stop
    by: str | None = None


@contextlib.contextmanager
def _cancelled_by_signal() -> Iterator[_Stopped]:
    """Ctrl-C (SIGINT) and SIGTERM (`timeout`, `kill`, a container or service manager)
    cancel the command inside this block, so it cleans up after itself (a benchmark's
    scratch database dropped, an export's partial file removed) before it exits 130 or 143.
    SIGTERM's default, ending the process at once, left all of that behind. What the command
    shields gets the stop's deadline (stopping.DEADLINE_SECONDS), a second signal ends it at
    once, and one that comes once the command has returned changes nothing. An anyio cancel,
    not the task's own (asyncio's Ctrl-C): a worker thread's call is waited for (an export's
    compressor closed under a write still in flight deadlocked) and shields hold. A Ctrl-C
    this process was told to ignore stays ignored; the services (`props serve`, ...) take
    both signals over for their own graceful stop."""
    import asyncio  # (here: `props --version` and `--help` never load it)
    import signal

    from props.core.log import stopping

    loop, stop = asyncio.get_running_loop(), stopping.current()
    stopped = _Stopped(stop)
    caught = [signal.SIGTERM] + ([signal.SIGINT] if signal.getsignal(signal.SIGINT)
                                 not in (signal.SIG_IGN, None) else [])
    signalled: list[str] = []

    def cancel(signum: signal.Signals) -> None:
        scope.cancel()
        signalled.append(signum.name)
        for each in caught:  # (the defaults again: a second signal ends the process)
            loop.remove_signal_handler(each)
        # ... SIGINT's too: asyncio's default raises KeyboardInterrupt inside the loop, past
        # anyio's worker threads, and the exit then waited on one of them for good.
        if signal.SIGINT in caught:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        stop.begin()

    with anyio.CancelScope() as scope:
        for signum in caught:
            loop.add_signal_handler(signum, cancel, signum)
        try:
            yield stopped
        finally:
            for signum in caught:
                loop.remove_signal_handler(signum)
    # (a command that caught the cancel and returned anyway was not stopped by it)
    stopped.by = signalled[0] if scope.cancelled_caught else None


async def execute(handler: Handler | StoreHandler, args: argparse.Namespace) -> int:
    """Run a command until it ends, or until Ctrl-C or SIGTERM cancels it."""
    code = EX_TERMINATED  # (replaced by the command's own unless a signal cancels it)
    with _cancelled_by_signal() as stopped:
        code = await _run(handler, args)
    if stopped.by is None:
        return code
    # A signal cancelled it, and its cleanup is done (had the cleanup failed, its error
    # would be on its way out instead, with its own line and code) or cut at the deadline.
    if stopped.stop.unfinished:
        print(f"props: {stopped.stop.report()}", file=sys.stderr)
    if stopped.by == "SIGINT":
        print("props: interrupted", file=sys.stderr)
        return EX_INTERRUPTED
    print("props: stopped by SIGTERM", file=sys.stderr)
    return EX_TERMINATED


async def _run(handler: Handler | StoreHandler, args: argparse.Namespace) -> int:
    """The command: with the store opened for it, as its parser asks, or alone."""
    connections = getattr(args, "connections", None)
    if connections is None:
        return await cast(Handler, handler)(args)
    from props.core.domain.store import open_store
    from props.core.log import database

    dsn = database.resolve_dsn() if getattr(args, "owner", False) else None
    if getattr(args, "migrate_new", False):  # (an owner's command: `import` into nothing)
        from props.core.log import migrate

        applied = await migrate.migrate_if_new(dsn or database.resolve_dsn())
        if applied:
            print(f"props: a new database: applied its {len(applied)} migration(s) first "
                  f"(`props db migrate`)", file=sys.stderr)
    async with open_store(dsn, max_connections=connections) as store:
        return await cast(StoreHandler, handler)(args, store)


def _command_word(argv: Sequence[str]) -> str | None:
    """The command `argv` names (its first word that is not an option), if any."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C while the command still loads: nothing to clean up
        return _exit_for(KeyboardInterrupt())


def _main(argv: Sequence[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--version"]:  # nothing else to load for it
        _say_version()
        return 0
    parser = build_parser(_command_word(argv))
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the command's own usage, with the flags it does take
        getattr(args, "command_parser", parser).error(
            f"unrecognized arguments: {' '.join(unknown)}")
    handler = handler_of(args.handler)
    # Everything imported so far lives as long as the process: keep the cyclic GC from
    # walking it again on every collection (it slowed single appends by ~5%, measured).
    gc.freeze()
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return anyio.run(execute, handler, args, backend="asyncio")
    except BaseException as exc:  # every way out is decided in _exit_for
        return _exit_for(_leaf(exc))


def _leaf(exc: BaseException) -> BaseException:
    """The one error inside task groups' exception groups, if there is only one."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _fail(message: str, code: int) -> int:
    print(f"props: error: {message}", file=sys.stderr)
    return code


def _exit_for(exc: BaseException) -> int:
    """The line and exit code of each expected way a command ends early; a traceback for a
    bug."""
    if isinstance(exc, errors.PropsError):
        return _fail(str(exc), exc.exit_code)
    if (props_error := errors.translate(exc, errors.REFUSALS)) is not exc:  # PostgreSQL's
        return _exit_for(props_error)
    if isinstance(exc, KeyboardInterrupt):
        print("props: interrupted", file=sys.stderr)
        return EX_INTERRUPTED
    if isinstance(exc, SystemExit):
        return exc.code if isinstance(exc.code, int) else _fail(str(exc.code), 1)
    if isinstance(exc, BrokenPipeError):  # `props ... | head`: the reader has all it wants
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error
        return EX_SIGPIPE
    if isinstance(exc, OSError) and exc.filename is not None:
        code = EX_NOPERM if isinstance(exc, PermissionError) else EX_NOINPUT
        return _fail(f"cannot use {exc.filename}: {exc.strerror}", code)
    traceback.print_exception(exc)
    print("props: this is a bug in props, not in what you asked: the traceback above says "
          "where. Please report it with the command you ran.", file=sys.stderr)
    return EX_SOFTWARE


if __name__ == "__main__":
    sys.exit(main())
