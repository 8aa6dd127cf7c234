"""Whether a failure is worth another attempt, and why: the one rule every retry asks.

A failure is named by its category (`engine_unreachable`, `exit_nonzero`, `llm_reset`, ...),
as a run's closed facts record it and as every error class says where it is defined; the
rule (`decide`) maps it to one of three kinds and so to retryable or not:
- transient: the moment's trouble, over by a later attempt (the database or a container
  engine away, a serialization failure or deadlock, a model server's outage). Retryable.
- refusal: props, PostgreSQL, an engine or a limit said no to what was asked. The same
  request gets the same answer: never retried blindly.
- defect: a bug of props, of an agent or of the event in hand. The same again fails the same
  way: never retried blindly.

`CATEGORIES` is the table (docs/internals/retries.md prints it, and a test holds the page to
it). An error says its own category and kind where it is defined (`PropsError.category`,
`PropsError.fault`: the runtimes' `EngineUnreachable` is transient), so no module here looks
at another's exceptions; the database's errors are read through `errors`/`database`, the
only driver this layer knows. A group from a task group is transient only if all of it is;
else a defect if any of it is one. A category the table does not know is never retryable.

What a tenacity policy retries (`retries`), what the launcher tries again and records as
`Failure.retryable`, and which failed cases `props eval run --retry-failed` requests again
are all this rule's answer.
"""

from __future__ import annotations

import dataclasses
import re

from props.core.log import database, errors

Kind = errors.Fault


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The rule's answer: the failure's kind, whether to try again, and why (one line)."""

    kind: Kind
    why: str

    @property
    def retryable(self) -> bool:
        return self.kind == "transient"


def _v(kind: Kind, why: str) -> Verdict:
    return Verdict(kind, why)


# The table: a category -> its verdict. llm_http_error is decided by its HTTP status (below).
CATEGORIES: dict[str, Verdict] = {
    # the database and the engines: what an error raised in props says it is
    "store_unavailable": _v("transient", "the database could not be reached; it comes back"),
    "store_conflict": _v("transient", "a serialization failure or deadlock: the next attempt "
                         "runs alone"),
    "store_refused": _v("refusal", "PostgreSQL refused the statement: the same one is refused "
                        "again"),
    "engine_unreachable": _v("transient", "the container engine did not answer (gone, "
                             "restarting, cut mid-answer); it comes back"),
    "engine_refused": _v("refusal", "the container engine refused the request (4xx): the "
                         "same request is refused again"),
    "refused": _v("refusal", "props refused what was asked: the same request gets the same "
                  "answer"),
    "defect": _v("defect", "a defect of props: the same again fails the same way; fix it first"),
    # a run's end, as the launcher records it (its category in run.finished)
    "launcher_defect": _v("defect", "a defect of props while carrying the run out: fix it "
                          "first"),
    "launcher_lost": _v("transient", "the launcher that held the run died and its container is "
                        "gone: nothing of the critic's ended it"),
    "runtime_unavailable": _v("transient", "no runtime for the definition here; a launcher "
                              "with one may run it"),
    "not_granted": _v("refusal", "the definition asks for what its digest was not granted "
                      "(network, the host's Python, an endpoint): grant it, then request again"),
    "image_missing": _v("transient", "no launcher alive holds or can pull the definition's "
                        "image: one that does may run it"),
    "run_lost": _v("transient", "the run's container was lost with its node: a new run of the "
                   "case may finish"),
    "definition_missing": _v("refusal", "the definition asked for is not pushed: push it, then "
                             "request again"),
    "brought_by_import": _v("refusal", "a run an import brought under this evaluation's id: "
                            "another database's history"),
    "timeout": _v("transient", "the run's time ran out: a less loaded attempt may finish"),
    "timed_out": _v("transient", "the run's time ran out: a less loaded attempt may finish"),
    "killed": _v("transient", "killed by a signal from outside (no exit of its own)"),
    "budget": _v("refusal", "over its budget: another attempt spends as much"),
    "budget_exceeded": _v("refusal", "over its budget: another attempt spends as much"),
    "out_of_memory": _v("refusal", "over its memory limit: the same limit ends it the same way"),
    "event_cap": _v("refusal", "the run reached a cap on what its agent reports (events or "
                    "bytes): the same cap ends it the same way; raise it for the critic"),
    "malformed_event": _v("defect", "the agent reported something malformed: the critic's "
                          "defect"),
    "exit_nonzero": _v("defect", "the critic exited with an error of its own"),
    "cancelled": _v("refusal", "someone cancelled it"),
    "failed": _v("defect", "no closed fact says what ended it"),
    # a model call that gave no usable answer (phase llm)
    "llm_unreachable": _v("transient", "the model server could not be reached; it comes back"),
    "llm_reset": _v("transient", "the model server cut its answer; it comes back"),
    "llm_timeout": _v("transient", "the model server did not answer in time: a less loaded "
                      "one may (a new run: not retried within the call, which took its time)"),
    "llm_overflow": _v("refusal", "the prompt is larger than the model's context"),
    "llm_malformed_body": _v("defect", "the server's body is not a chat completion"),
    "llm_unreadable": _v("defect", "the model's answer is not the JSON asked for"),
    "llm_truncated": _v("refusal", "the answer was cut at the token limit: the same limit cuts "
                        "it again"),
    "llm_refused": _v("refusal", "the model refused to answer"),
}
_HTTP_PASSING = frozenset({429, 500, 502, 503, 504})
_HTTP_BUSY = _v("transient", "the model server was busy or failed on its side (429, 5xx); it "
                "comes back")
_HTTP_REFUSED = _v("refusal", "the model server refused the request (4xx): the same request is "
                   "refused again")
_UNKNOWN = _v("defect", "not a failure the rule knows to pass: never retried blindly")

_ABORTED_STATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock


def decide(category: str, phase: str = "run", *, http_status: int | None = None,
           recorded: bool | None = None) -> Verdict:
    """The rule: whether a failure of `category` (in `phase`: launch, run, report, llm) is
    worth another attempt, and why. `http_status`: a model server's answer, which decides
    llm_http_error; a failure recorded without it (a run's Failure keeps no status) is
    decided by what the rule said when it was recorded (`recorded`)."""
    if category == "llm_http_error":
        if http_status is not None:
            return _HTTP_BUSY if http_status in _HTTP_PASSING else _HTTP_REFUSED
        return _HTTP_BUSY if recorded else _HTTP_REFUSED
    del phase  # (no category's answer depends on its phase today: the name says enough)
    return CATEGORIES.get(category, _UNKNOWN)


def category_of(exc: BaseException) -> str:
    """The category an error says it is (a `PropsError`'s own, else the database's kind, else
    a defect)."""
    if isinstance(exc, errors.PropsError):
        return exc.category or _snake(type(exc).__name__)
    if isinstance(exc, database.CONNECTION_ERRORS):
        return "store_unavailable"
    state = errors.sqlstate(exc)
    if state in _ABORTED_STATES:
        return "store_conflict"
    return "defect" if state is None else "store_refused"


def of_error(exc: BaseException) -> Verdict:
    """The rule's answer for an error raised in props (see the module's doc)."""
    if isinstance(exc, BaseExceptionGroup):
        verdicts = [of_error(e) for e in exc.exceptions]
        kinds = {v.kind for v in verdicts}
        if kinds == {"transient"}:
            return verdicts[0]
        return next(v for v in verdicts if v.kind == ("defect" if "defect" in kinds
                                                      else "refusal"))
    if isinstance(exc, errors.PropsError):
        # Its category's row when the table has one and agrees, else what its class says:
        # an error in hand is retried in place only when its class says transient too (a
        # secret refused by this launcher's allow-list is refused again here; a new run, by
        # a launcher that passes it, may not be).
        found = CATEGORIES.get(category_of(exc))
        return found if found is not None and found.kind == exc.fault else \
            _v(exc.fault, f"{type(exc).__name__}: {_KIND_WHY[exc.fault]}")
    return decide(category_of(exc))


_KIND_WHY: dict[Kind, str] = {
    "transient": "the moment's trouble; a later attempt may succeed",
    "refusal": "a refusal: the same request gets the same answer",
    "defect": "a defect: the same again fails the same way"}


def kind(exc: BaseException) -> Kind:
    """The kind of `exc` (see the module's doc)."""
    return of_error(exc).kind


def transient(exc: BaseException) -> bool:
    """Whether the rule calls `exc` worth another attempt."""
    return of_error(exc).retryable


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
