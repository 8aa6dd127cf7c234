"""One exception root for everything props raises on purpose.

Each class's docstring says what happened; each message adds the specifics and what to do.
Driver errors (asyncpg, OSError) are wrapped at the boundary so callers catch `PropsError`.
`exit_code` is what the CLI exits with when the error reaches it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

# What kind of failure (props.core.log.faults): each class says, its subclasses inherit it.
Fault = Literal["transient", "refusal", "defect"]


class PropsError(Exception):
    """props could not do what was asked."""

    exit_code = 1
    fault: Fault = "refusal"  # props said no; the same request gets the same answer
    # The failure's name in the retry rule's table (props.core.log.faults) and in a run's
    # closed facts; None: the class's name in snake case.
    category: str | None = None

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or type(self).__name__).strip())


class ConfigurationError(PropsError):
    """The configuration (environment variables, files) is invalid."""

    exit_code = 78  # EX_CONFIG


class StoreUnavailable(PropsError):
    """The PostgreSQL server cannot be reached."""

    exit_code = 69  # EX_UNAVAILABLE
    fault: Fault = "transient"  # it comes back; a later attempt may succeed


class EmbeddedServerError(StoreUnavailable):
    """The embedded PostgreSQL server could not be started or stopped."""


class SchemaError(PropsError):
    """The database schema is missing, outdated or was changed after it was applied."""

    exit_code = 65


class InvalidEvent(PropsError):
    """An event does not match its type's schema; nothing was written."""

    exit_code = 65  # EX_DATAERR


class UnknownEventType(InvalidEvent):
    """The event type is not in the catalog."""


class EventVersionError(InvalidEvent):
    """An event was stored with a schema version this props cannot read."""


class PayloadTooLarge(InvalidEvent):
    """An event payload is larger than an event may be; large content belongs in a blob."""


class ConcurrencyConflict(PropsError):
    """A stream was not at the version the append expected; nothing was written."""

    exit_code = 75  # EX_TEMPFAIL: re-read the stream and decide again

    def __init__(self, stream_id: str, expected: int | None, actual: int, detail: str = "") -> None:
        self.stream_id = stream_id
        self.expected = expected
        self.actual = actual
        wanted = "no stream (version 0)" if expected == 0 else f"version {expected}"
        super().__init__(
            f"stream {stream_id!r} is at version {actual}, the append expected {wanted}"
            f"{detail}; nothing was written: re-read the stream and retry"
        )


class DuplicateEventConflict(PropsError):
    """An event id in the batch is already stored, but not as part of this same append."""

    exit_code = 65


class AppendOnlyViolation(PropsError):
    """The log is append-only: rows are never updated, deleted or truncated."""

    exit_code = 77  # EX_NOPERM


class PrivilegeRequired(PropsError):
    """The command needs a privilege the connection's role does not have: the role in
    PROPS_DSN may not do this (the owner's DSN: `props db dsn`; the service's: `props db dsn
    --service`)."""

    exit_code = 77  # EX_NOPERM


class Ambiguous(PropsError):
    """A prefix that names more than one thing: the message lists them."""

    exit_code = 65  # EX_DATAERR: the user's input does not name one thing


class NotFound(PropsError):
    """Something named (a run, a definition, a snapshot, a token) is not in the log."""

    exit_code = 66  # EX_NOINPUT


class BlobNotFound(NotFound):
    """No blob is stored under that hash."""


class CorruptBlob(PropsError):
    """A stored blob does not decompress to the bytes its hash names."""

    exit_code = 65


class UnknownScorer(PropsError):
    """No scorer of that name (and version) is known: the message lists the known ones."""

    exit_code = 66  # EX_NOINPUT: named and not there, as a run or a definition (one code
    # wherever a scorer is named: rescore, compare, report, review, scorers eval)


class UnknownLogPoint(PropsError):
    """The point of the log asked for (`--as-of`) is not one: malformed, or no event is
    there behind the visibility fence."""

    exit_code = 65  # EX_DATAERR: a point the user gave


class CheckpointConflict(PropsError):
    """Another consumer moved this checkpoint; this one must stop (one active consumer)."""

    exit_code = 75


class NotBuilt(SchemaError):
    """A table the command reads is not there yet: run `props db migrate`, then `props
    projections rebuild --all` (or keep `props projections run` or `props serve` running)."""


class Busy(StoreUnavailable):
    """A table was busy past the lock wait the statement allows: nothing was changed; try
    again."""

    exit_code = 75  # EX_TEMPFAIL


class AlreadyExists(PropsError):
    """Something of that name or key is recorded already."""

    exit_code = 65


class ValueRefused(PropsError):
    """The database refused a value: out of its column's range or shape, or against one of
    its checks."""

    exit_code = 65


class OutOfRange(ValueRefused):
    """A value past its column's type (an int4, a bigint)."""


class StreamGap(PropsError):
    """Events that continue a stream at versions this database does not have (the log's
    versions are dense): the events before them come first."""

    exit_code = 65


# -- PostgreSQL's answers, translated (psycopg's errors.py is the model) -------------------------
# The log's own SQLSTATEs, raised by its triggers (schema/migrations): named once, here.
APPEND_ONLY = "PX001"  # a row of the log (or of a side table) was to be changed or removed
STREAM_MOVED = "PX409"  # the dense-version trigger: the stream is not at the version assumed
CHECK_VIOLATION = "23514"
NUMERIC_OUT_OF_RANGE = "22003"  # a value past its column's type (int4, bigint)

# SQLSTATE -> the class a caller catches. Only states that mean the same everywhere.
_BY_SQLSTATE: dict[str, type[PropsError]] = {APPEND_ONLY: AppendOnlyViolation}
# ... and for the statements above the log (`store.sql`, and `refused()` around a connection
# of its): every state props acts on, each one class, where it enters; a whole class of
# states ("22": a data exception) by its first two characters. The store's own append path
# reads the raw states instead (a check violation there is a missing partition, to make).
REFUSALS: dict[str, type[PropsError]] = {
    **_BY_SQLSTATE, STREAM_MOVED: StreamGap, "23505": AlreadyExists, "42P01": NotBuilt,
    "42501": PrivilegeRequired, "55P03": Busy, NUMERIC_OUT_OF_RANGE: OutOfRange,
    "22": ValueRefused, "23": ValueRefused}


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a driver error (asyncpg or psycopg), None for anything else."""
    state = getattr(exc, "sqlstate", None)
    return state if isinstance(state, str) else None


def stream_moved(exc: BaseException) -> bool:
    return sqlstate(exc) == STREAM_MOVED


def missing_partition(exc: BaseException) -> bool:
    """An insert past the last partition of the log (made on demand, never in advance): a
    check violation that names no constraint (a CHECK constraint's names its own)."""
    return sqlstate(exc) == CHECK_VIOLATION and getattr(exc, "constraint_name", "") is None


@contextlib.contextmanager
def translated(states: dict[str, type[PropsError]] = _BY_SQLSTATE) -> Iterator[None]:
    """Raise a driver error the block lets out as the props exception it stands for."""
    try:
        yield
    except Exception as exc:
        props_error = translate(exc, states)
        if props_error is exc:
            raise
        raise props_error from exc


def refused() -> contextlib.AbstractContextManager[None]:
    """Around statements on a connection of `store.sql.acquire()`: PostgreSQL's refusals
    raised as props' (REFUSALS), as `store.sql`'s own statements raise them."""
    return translated(REFUSALS)


def translate(exc: BaseException,
              states: dict[str, type[PropsError]] = _BY_SQLSTATE) -> BaseException:
    """The props exception a driver error stands for (raised `from` it), or `exc` itself."""
    state = sqlstate(exc) or ""
    cls = states.get(state) or states.get(state[:2])
    if cls is None:
        return exc
    said = " ".join((cls.__doc__ or "").split())  # one line, as every error says it
    props_error = cls(f"{said} The database refused: {exc}")
    props_error.__cause__ = exc
    return props_error
