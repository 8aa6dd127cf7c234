"""What kind of failure an error is: the one answer every retry, park and restart asks for.

- transient: the moment's trouble, over by a later attempt (the database or a container
  engine away, a serialization failure or deadlock, a lock session lost). Retried, never
  parked.
- refusal: props or PostgreSQL said no to what was asked (a rule, a bound, a conflict: a
  `PropsError`, a statement the server refused). The same request gets the same answer.
- defect: anything else, a bug of the code or of the event in hand. The same again fails
  the same way.

Errors say their kind where they are defined (`PropsError.fault`, e.g. `StoreUnavailable`
and the runtimes' `EngineUnreachable` are transient), so a new error class needs no edit
here. A group from a task group is transient only if all of it is; else a defect if any of
it is one.
"""

from __future__ import annotations

import sys

from props.core.log import database, errors

Kind = errors.Fault

_ABORTED_STATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock


def kind(exc: BaseException) -> Kind:
    """The kind of `exc` (see the module's doc)."""
    if isinstance(exc, BaseExceptionGroup):
        kinds = {kind(e) for e in exc.exceptions}
        if kinds == {"transient"}:
            return "transient"
        return "defect" if "defect" in kinds else "refusal"
    if isinstance(exc, errors.PropsError):
        return exc.fault
    if isinstance(exc, database.CONNECTION_ERRORS) or errors.sqlstate(exc) in _ABORTED_STATES:
        return "transient"
    if _engine_error(exc):
        return "transient"
    if errors.sqlstate(exc) is not None:
        return "refusal"
    return "defect"


def transient(exc: BaseException) -> bool:
    return kind(exc) == "transient"


def _engine_error(exc: BaseException) -> bool:
    """A Docker engine's answer other than success (it restarts, it is overloaded): read
    only if aiodocker is loaded at all, so the log's code does not load it."""
    aiodocker = sys.modules.get("aiodocker")
    return aiodocker is not None and isinstance(exc, aiodocker.DockerError)
