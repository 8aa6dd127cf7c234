"""csvtool command line: head, stats, columns."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from csvtool import __version__
from csvtool.output import print_summary, print_table
from csvtool.reader import CsvError, column, read_table, sniff_delimiter
from csvtool.stats import summarize


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="csvtool", description=__doc__)
    parser.add_argument("--version", action="version", version=__version__)
    parser.add_argument("--delimiter", help="field delimiter (default: guessed)")
    sub = parser.add_subparsers(dest="command", required=True)

    head = sub.add_parser("head", help="print the first rows")
    head.add_argument("path")
    head.add_argument("-n", "--rows", type=int, default=10)

    stats = sub.add_parser("stats", help="summary statistics of a numeric column")
    stats.add_argument("path")
    stats.add_argument("column")
    stats.add_argument("--json", action="store_true")

    cols = sub.add_parser("columns", help="list the columns")
    cols.add_argument("path")
    return parser


def cmd_head(args: argparse.Namespace, delimiter: str) -> int:
    header, rows = read_table(args.path, delimiter=delimiter)
    if args.rows < 0:
        print("csvtool: --rows must be positive", file=sys.stderr)
        return 2
    print_table(header, rows[: args.rows - 1])
    return 0


def cmd_stats(args: argparse.Namespace, delimiter: str) -> int:
    header, rows = read_table(args.path, delimiter=delimiter)
    values = column(header, rows, args.column)
    print_summary(args.column, summarize(values), as_json=args.json)
    return 0


def cmd_columns(args: argparse.Namespace, delimiter: str) -> int:
    header, _rows = read_table(args.path, delimiter=delimiter)
    for i, name in enumerate(header, start=1):
        print(f"{i:>3}  {name}")
    return 0


COMMANDS = {"head": cmd_head, "stats": cmd_stats, "columns": cmd_columns}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        delimiter = args.delimiter or sniff_delimiter(args.path)
        return COMMANDS[args.command](args, delimiter)
    except CsvError as exc:
        print(f"csvtool: {exc}", file=sys.stderr)
        return 1
    except FileNotFoundError as exc:
        print(f"csvtool: {exc.filename}: no such file", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
