"""Argument types the commands share: a value argparse refuses is a usage error (exit 2,
with the command's usage), never a traceback or an empty answer to a typo."""

from __future__ import annotations

import argparse
import re
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from props.core.domain import streams
from props.core.log import errors

if TYPE_CHECKING:
    from props.core.log.store import EventStore


def positive_int(text: str) -> int:
    """A whole number from 1 (`--limit`, `--count`)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not 1 or more")
    return value


def non_negative_int(text: str) -> int:
    """A whole number from 0 to 2^63-1 (a log position)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"{value} is not from 0 to 2^63-1")
    return value


def bounded_text(most: int) -> Callable[[str], str]:
    """Free text of 1 to `most` characters, no control characters but newlines and tabs (a
    reason recorded in the log)."""
    def parse(text: str) -> str:
        if not 1 <= len(text) <= most or any(
                (ord(c) < 32 and c not in "\n\t") or ord(c) == 127 for c in text):
            raise argparse.ArgumentTypeError(f"1 to {most:,} printable characters")
        return text
    return parse


def limit(most: int) -> Callable[[str], int]:
    """A whole number from 1 to `most` (a page of rows: each one is read, scored, printed)."""
    def parse(text: str) -> int:
        value = positive_int(text)
        if value > most:
            raise argparse.ArgumentTypeError(f"{value} is more than {most:,}")
        return value
    return parse


def seconds(most: float) -> Callable[[str], float]:
    """A duration in seconds from 0 to `most` (a finite number: `nan`, `inf` refused)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not 0 <= value <= most:  # (false for nan)
            raise argparse.ArgumentTypeError(f"{text} is not from 0 to {most:g} seconds")
        return value
    return parse


def name(text: str) -> str:
    """A model's, definition's, snapshot's or evaluation's name as a filter: 1 to 200
    characters (the catalog's bound), no control characters."""
    if not 1 <= len(text) <= 200 or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a name (1 to 200 printable "
                                         f"characters)")
    return text


_CATEGORY = re.compile(r"[a-z][a-z0-9_]{0,199}")


def categories(text: str) -> list[str]:
    """Stream categories, one or several separated by commas (`run,grading`), each as a
    stream id starts (`run` of `run-<id>`, at most 200 characters): `action="extend"` takes
    them as the flag repeated."""
    named = [c.strip() for c in text.split(",") if c.strip()]
    bad = next((c for c in named if not _CATEGORY.fullmatch(c)), None)
    if not named or bad is not None:
        raise argparse.ArgumentTypeError(f"{(bad or text)[:40]!r} is not a stream category "
                                         f"(lower-case letters, digits and _, as a stream "
                                         f"id starts)")
    return named


def push_target(text: str) -> str:
    """Where an image is pushed: REGISTRY/REPOSITORY:TAG, the registry named
    (props.core.domain.image_refs)."""
    from props.core.domain import image_refs

    try:
        image_refs.push_target(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def base_source(text: str) -> str:
    """A base: an image reference, or the path of a root filesystem tar (1 to 4,096
    printable characters; which one it is, and whether it is there, the command decides)."""
    if not 1 <= len(text) <= 4096 or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an image or a path (1 to "
                                         f"4,096 printable characters)")
    return text


def runtime_name(text: str) -> str:
    """A runtime's name as runtimes register (the catalog's RuntimeName: a lower-case
    letter, then up to 31 of them, digits, - or _; whether one is registered, the command
    decides)."""
    if not re.fullmatch(r"[a-z][a-z0-9_-]{0,31}", text):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a runtime's name")
    return text


SHORT = 8  # hex digits of a run id shown in tables


def run_ref(text: str) -> str:
    """A run id, or a unique prefix of one (at least 4 hex digits, as tables show 8)."""
    ref, least = text.strip().lower(), streams.SHORTEST_PREFIX
    if re.fullmatch(r"[0-9a-f-]+", ref) and len(ref) < least:
        raise argparse.ArgumentTypeError(
            f"{text!r} is too short to name a run: give at least {least} hex digits of its "
            f"id (tables show {SHORT})")
    if not re.match(streams.RUN_REF, ref):
        raise argparse.ArgumentTypeError(f"{text!r} is not a run id or a prefix of one")
    return ref


async def resolve_run(store: EventStore, ref: str) -> uuid.UUID:
    """The run `ref` names (run_requests.resolve)."""
    from props.core.domain import run_requests

    return await run_requests.resolve(store, ref)


async def resolve_runs(store: EventStore, refs: list[str] | None) -> list[uuid.UUID] | None:
    """The runs a repeated `--run` names, each resolved as `resolve_run` (None: not given)."""
    return None if refs is None else [await resolve_run(store, ref) for ref in refs]


FORMATS = ("table", "json", "csv")


def add_format(parser: argparse.ArgumentParser, formats: tuple[str, ...] = FORMATS) -> None:
    """`--format table|json|csv`, `--json` (the same as `--format json`) and `--wide`."""
    others = " or ".join(f.upper() for f in formats if f != "table")
    out = parser.add_argument_group("output")
    out.add_argument("--format", choices=formats, default="table",
                     help=f"a table for people (default); {others} for programs (one "
                          "document on stdout, numbers as numbers, times in ISO 8601)")
    out.add_argument("--json", dest="format", action="store_const", const="json",
                     help="the same as --format json")
    out.add_argument("--wide", action="store_true",
                     help="every column, unsqueezed, however wide the terminal (a narrow "
                          "one leaves out the columns it has no room for, and says which)")


def parse_address(text: str, what: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets), or a ConfigurationError naming `what`."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host or int(port) > 65535:
        raise errors.ConfigurationError(f"{what} {text!r} is not HOST:PORT (e.g. 127.0.0.1:8080)")
    return host.strip("[]"), int(port)
