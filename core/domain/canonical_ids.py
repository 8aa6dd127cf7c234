"""Ids in an export file as props writes them: canonical UUIDs (lower-case, 8-4-4-4-12).

Python's and PostgreSQL's uuid parsers take other spellings of the same id (upper case,
braces, `urn:uuid:`, hyphens anywhere or none), and the catalog accepts them; but the log
keeps an event's data and its stream name as text, and every check that compares ids as
text (is this run this database's own? does this stream continue one begun here?) would
see two ids where the projections, which parse them, see one. So an import takes only the
spelling props writes: one id, one text.
"""

from __future__ import annotations

import functools
import re
import typing
import uuid
from typing import Any

import pydantic

# The categories whose stream names begin with a critic run's id (streams.run, grading,
# judge, retention, review).
RUN_KEYED = frozenset({"run", "grading", "judge", "retention", "review"})
# What uuid.UUID would read as an id at the start of a name: 32 hex digits with hyphens
# anywhere, perhaps braced or as a URN.
_LOOSE = re.compile(r"\{?(?:urn:uuid:)?(?:[0-9a-fA-F]-*){31}[0-9a-fA-F]\}?", re.IGNORECASE)


_CANONICAL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_canonical(text: Any) -> bool:
    """Whether `text` is a UUID spelled as props writes it (a pattern: parsing and printing
    it cost ten times as much, for every imported event)."""
    return isinstance(text, str) and _CANONICAL.fullmatch(text) is not None


def loose_stream_id(stream_id: str) -> str | None:
    """The run id a run-keyed stream's name begins with, when spelled another way than
    props writes it (None: canonical, or a stream of another kind)."""
    category, _, rest = stream_id.partition("-")
    if category not in RUN_KEYED:
        return None
    if _CANONICAL.match(rest) and rest[36:37] in ("", "-"):  # props' spelling: most names
        return None
    found = _LOOSE.match(rest)
    if found is None or is_canonical(found.group()):
        return None
    return found.group()


def loose_id(value: Any, raw: Any) -> tuple[str, Any] | None:
    """(where, as written) of the first id in `raw` (an event's data as the file holds it)
    that the catalog read into a UUID of `value` (the event it validated) from another
    spelling; None when every id is spelled as props writes it."""
    found = _loose(value, raw)
    return None if found is None else ("data" + found[0], found[1])


def _loose(value: Any, raw: Any) -> tuple[str, Any] | None:
    """`loose_id`, its path relative to `value`, built only for the id found. This runs for
    every imported event: a dictionary of each model's id fields, no generator."""
    if type(value) is uuid.UUID:
        # The text parsed into a UUID: 36 characters, hyphens at 8-4-4-4-12 and lower case
        # leave room for nothing but the canonical spelling (and cost a tenth of str()).
        canonical = (type(raw) is str and len(raw) == 36 and raw == raw.lower()
                     and raw[8] == raw[13] == raw[18] == raw[23] == "-")
        return None if canonical else ("", raw)
    pairs: list[tuple[str | int, Any, Any]]
    fields = _MODELS.get(type(value))
    if fields is None and isinstance(value, pydantic.BaseModel):
        fields = _MODELS[type(value)] = _id_fields(type(value))
    if fields is not None:
        if not fields or not isinstance(raw, dict):
            return None
        pairs = [(key, getattr(value, name), raw[key]) for name, key in fields if key in raw]
    elif isinstance(value, list | tuple) and isinstance(raw, list):
        pairs = [(n, item, written)
                 for n, (item, written) in enumerate(zip(value, raw, strict=False))]
    elif isinstance(value, dict) and isinstance(raw, dict):
        pairs = [(key, item, raw[key]) for key, item in value.items()
                 if isinstance(key, str) and key in raw]
    else:
        return None
    for at, item, written in pairs:
        found = _loose(item, written)
        if found is not None:
            return (f"[{at}]" if isinstance(at, int) else f".{at}") + found[0], found[1]
    return None


# Each model class met: its fields that may hold an id (see _id_fields).
_MODELS: dict[type, tuple[tuple[str, str], ...]] = {}


@functools.cache
def _id_fields(cls: type[pydantic.BaseModel]) -> tuple[tuple[str, str], ...]:
    """(attribute, key in the data) of the fields of `cls` that may hold a UUID: only those
    are walked, so checking an event costs what its ids cost."""
    return tuple((name, field.alias or name) for name, field in cls.model_fields.items()
                 if _may_hold_ids(field.annotation))


def _may_hold_ids(annotation: Any) -> bool:
    if annotation is uuid.UUID:
        return True
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return bool(_id_fields(annotation))
    return any(_may_hold_ids(arg) for arg in typing.get_args(annotation))
