"""URL-style DSNs taken apart and put together again: another database or role on the same
server, and a DSN fit to print. Beneath `database` and `embedded` alike (the embedded
server's DSNs are built with these), so neither imports the other for them."""

from __future__ import annotations

import re
import urllib.parse

from props.core.log import errors


def redact(dsn: str) -> str:
    """The DSN without its password, for messages and logs."""
    dsn = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", dsn)
    return re.sub(r"(password=)[^&\s]*", r"\1***", dsn)


def url_parts(dsn: str) -> tuple[str, str, str, str]:
    """(scheme, authority, database, query) of a URL-style DSN."""
    if "://" not in dsn:
        raise errors.ConfigurationError(
            f"expected a URL-style DSN (postgresql://...), got {redact(dsn)!r}"
        )
    base, _, query = dsn.partition("?")
    scheme, _, rest = base.partition("://")
    authority, _, name = rest.partition("/")
    return scheme, authority, name, query


def _url(scheme: str, authority: str, name: str, query: str) -> str:
    return f"{scheme}://{authority}/{name}" + (f"?{query}" if query else "")


def with_database(dsn: str, database: str) -> str:
    """The same server as `dsn`, another database."""
    scheme, authority, _name, query = url_parts(dsn)
    return _url(scheme, authority, database, query)


def with_user(dsn: str, user: str, password: str | None = None) -> str:
    """The same server and database as `dsn`, as another role (with `password`, if given:
    none means the server's own rules decide)."""
    scheme, authority, name, query = url_parts(dsn)
    login = user if password is None else f"{user}:{urllib.parse.quote(password, safe='')}"
    return _url(scheme, f"{login}@{authority.rpartition('@')[2]}", name, query)
