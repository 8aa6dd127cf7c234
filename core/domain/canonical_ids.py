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
from collections.abc import Iterator
from typing import Any

import pydantic

# The categories whose stream names begin with a critic run's id (streams.run, grading,
# judge, retention, review).
RUN_KEYED = frozenset({"run", "grading", "judge", "retention", "review"})
# What uuid.UUID would read as an id at the start of a name: 32 hex digits with hyphens
# anywhere, perhaps braced or as a URN.
_LOOSE = re.compile(r"\{?(?:urn:uuid:)?(?:[0-9a-fA-F]-*){31}[0-9a-fA-F]\}?", re.IGNORECASE)


def is_canonical(text: Any) -> bool:
    """Whether `text` is a UUID spelled as props writes it."""
    try:
        return isinstance(text, str) and str(uuid.UUID(text)) == text
    except ValueError:
        return False


def loose_stream_id(stream_id: str) -> str | None:
    """The run id a run-keyed stream's name begins with, when spelled another way than
    props writes it (None: canonical, or a stream of another kind)."""
    category, _, rest = stream_id.partition("-")
    if category not in RUN_KEYED:
        return None
    found = _LOOSE.match(rest)
    if found is None or is_canonical(found.group()):
        return None
    return found.group()


def loose_ids(value: Any, raw: Any, at: str = "data") -> Iterator[tuple[str, Any]]:
    """(where, as written) of each id in `raw` (the data as the file holds it) that the
    catalog read into a UUID of `value` (the event it validated) from another spelling."""
    if isinstance(value, uuid.UUID):
        if raw != str(value):
            yield at, raw
    elif isinstance(value, pydantic.BaseModel) and isinstance(raw, dict):
        for name, key in _id_fields(type(value)):
            if key in raw:
                yield from loose_ids(getattr(value, name), raw[key], f"{at}.{key}")
    elif isinstance(value, list | tuple) and isinstance(raw, list):
        for n, (item, written) in enumerate(zip(value, raw, strict=False)):
            yield from loose_ids(item, written, f"{at}[{n}]")
    elif isinstance(value, dict) and isinstance(raw, dict):
        for key, item in value.items():
            if isinstance(key, str) and key in raw:
                yield from loose_ids(item, raw[key], f"{at}.{key}")


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
