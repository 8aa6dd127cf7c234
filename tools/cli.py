"""`props`: the command line. Each sub-command lives in its own module; this one wires them.

Errors that props raises on purpose (`PropsError`) print one line saying what happened and
what to do, and exit with the error's code; anything else is a bug and shows a traceback.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence

import anyio

from props.core import errors
from props.tools import (
    archive_commands,
    bench_command,
    chaos,
    db_commands,
    demo,
    event_commands,
    key_commands,
    projection_commands,
    reactor_commands,
    report_command,
    review_commands,
    run_commands,
    scoring_commands,
    specimen_commands,
    token_commands,
)

Handler = Callable[[argparse.Namespace], Awaitable[int]]

DESCRIPTION = """\
props evaluates code-review agents on an event-sourced PostgreSQL log.

Every action is an event appended to one table; everything else is derived from it.
Database: PROPS_DSN if set, else an embedded PostgreSQL under PROPS_HOME
(default ~/.local/share/props), started on first use and kept running (`props db stop`).
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="props", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what props is doing")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    db_commands.add_parser(sub)
    event_commands.add_parser(sub)
    specimen_commands.add_parser(sub)
    projection_commands.add_parser(sub)
    report_command.add_parser(sub)
    review_commands.add_parser(sub)
    scoring_commands.add_parsers(sub)
    archive_commands.add_parsers(sub)
    reactor_commands.add_parsers(sub)
    run_commands.add_parsers(sub)
    token_commands.add_parser(sub)
    key_commands.add_parser(sub)
    demo.add_parser(sub)
    bench_command.add_parser(sub)
    chaos.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # Everything imported so far lives as long as the process: keep the cyclic GC from
    # walking it again on every collection (it slowed single appends by ~5%, measured).
    gc.freeze()
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    handler: Handler = args.handler
    try:
        return anyio.run(handler, args, backend="asyncio")
    except errors.PropsError as exc:
        print(f"props: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("props: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
