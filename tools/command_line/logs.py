"""Log lines of the long-running commands: text, or one JSON object per line."""

from __future__ import annotations

import logging
import sys
from typing import Any

import orjson

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and any `extra` fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(), "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def configure(fmt: str, verbose: bool, access_log: bool = True) -> None:
    """`text` or `json` lines on stderr; warnings and up, everything with `verbose`; what
    the service starts is always logged, and each request the API and the registry serve
    unless `access_log` is off (the viewer on one's own machine: its errors only)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    for name in ("props.serve", "props.runs", *(("props.http", "props.registry")
                                                if access_log or verbose else ())):
        logging.getLogger(name).setLevel(logging.INFO)
    # Docker tries TLS first on a plain-HTTP registry: each try is an "Invalid HTTP request"
    # warning that says nothing about props.
    logging.getLogger("uvicorn.error").setLevel(logging.ERROR)
