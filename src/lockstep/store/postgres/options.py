"""The one option lockstep reads from a PostgreSQL URL itself: `prepare_threshold`, psycopg's setting of
when a query becomes a server-side prepared statement (after 5 executions by default). A PgBouncer
before 1.21 in transaction mode hands the next transaction another server connection, where the
statement does not exist (`prepared statement "_pg3_0" does not exist`): `?prepare_threshold=none`
turns prepared statements off. It is taken out of the URL before libpq sees it (libpq refuses
parameters it does not know)."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..port import SchemaError

__all__ = ["DEFAULT_PREPARE_THRESHOLD", "split_options"]

# psycopg's own default: lockstep keeps it unless the URL says otherwise.
DEFAULT_PREPARE_THRESHOLD = 5
OPTION = "prepare_threshold"


def split_options(url: str) -> tuple[str, int | None]:
    """The URL libpq gets, and the prepare threshold (None: never prepare). Only URLs
    (postgresql://...) carry the option; a key=value connection string is passed through."""
    if "://" not in url:
        return url, DEFAULT_PREPARE_THRESHOLD
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    given = [v for k, v in pairs if k == OPTION]
    if not given:
        return url, DEFAULT_PREPARE_THRESHOLD
    rest = urlencode([(k, v) for k, v in pairs if k != OPTION])
    return urlunsplit(parts._replace(query=rest)), _threshold(given[-1])


def _threshold(value: str) -> int | None:
    if value.lower() in ("none", "off"):
        return None
    if value.isdigit():
        return int(value)
    raise SchemaError(
        f"{OPTION}={value!r} in the database URL: give a number of executions (0: prepare at once) or "
        "none (never prepare; for PgBouncer before 1.21 in transaction mode)"
    )
