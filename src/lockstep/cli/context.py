"""The state every command receives: the global options and the engine, opened on first use."""

from __future__ import annotations

import getpass
import os
from typing import TYPE_CHECKING

import click

from ..core.limits import DEFAULT_SERVER_LIMITS, ServerLimits
from ..engine import Engine
from ..errors import InvalidInput

if TYPE_CHECKING:
    from ..client import Client

# The commands that work over --url (the HTTP API) as well as on the database.
REMOTE_COMMANDS = (
    "runs, show, events, start, cancel, worker, the repair commands (retry, dead-letters, pause, "
    "resume, skip, edit-input, resolve, confirm, reject-proposal, migrate RUN), approvals "
    "link/links/revoke/reassign/inbox/decide and migrations list/show"
)

__all__ = ["REMOTE_COMMANDS", "Ctx", "cli_user", "pass_ctx"]


class Ctx:
    def __init__(
        self,
        db: str,
        tenant: str,
        limits: ServerLimits = DEFAULT_SERVER_LIMITS,
        key_file: str | None = None,
    ) -> None:
        self.db = db
        self.tenant = tenant
        self.limits = limits
        # The key that seals sensitive values (None: LOCKSTEP_KEY_FILE or LOCKSTEP_KEY, if set).
        self.key_file = key_file
        self._engine: Engine | None = None
        # `verify` sets this False before it opens the engine: it must open a damaged database to
        # report what is wrong with it, where every other command refuses to start.
        self.refuse_damaged = True
        # A lockstep server to talk to over HTTP instead of the database (--url, --api-key-file).
        self.url: str | None = None
        self.api_key_file: str | None = None
        self.db_given = False  # --db (or LOCKSTEP_DB) was given: it cannot go with --url
        self._client: Client | None = None

    @property
    def remote(self) -> bool:
        """Whether commands go to a server (--url) rather than to the database."""
        return self.url is not None

    def database_only(self, command: str) -> None:
        """Refuse --url for `command`, which works on the database itself (a file, a schema)."""
        if self.url is not None:
            raise InvalidInput(
                f"`lockstep {command}` works on the database itself, not over --url: run it where the "
                "database is, with --db URL (unset LOCKSTEP_URL if it comes from the environment)"
            )

    @property
    def engine(self) -> Engine:
        if self.url is not None:
            self._exclusive()
            raise InvalidInput(
                f"this command needs the database (--db URL); over --url only {REMOTE_COMMANDS} work"
            )
        if self._engine is None:
            self._engine = Engine.open(
                self.db, server_limits=self.limits, keys=self.key_file, refuse_damaged=self.refuse_damaged
            )
        return self._engine

    @property
    def client(self) -> Client:
        """The HTTP client of --url, with the key of --api-key-file (or LOCKSTEP_API_KEY)."""
        from ..client import Client  # noqa: PLC0415 - only commands given --url load it

        if self.url is None:
            raise InvalidInput("this needs --url https://HOST (a lockstep server) and --api-key-file FILE")
        self._exclusive()
        if self._client is None:
            key = None if self.api_key_file else os.environ.get("LOCKSTEP_API_KEY") or None
            if self.api_key_file is None and key is None:
                raise InvalidInput(
                    "--url needs an API key: --api-key-file FILE "
                    "(or env LOCKSTEP_API_KEY_FILE, LOCKSTEP_API_KEY)"
                )
            self._client = Client(
                self.url,
                api_key=key,
                api_key_file=self.api_key_file,
                allow_http=os.environ.get("LOCKSTEP_ALLOW_INSECURE_HTTP") == "1",
            )
        return self._client

    def _exclusive(self) -> None:
        if self.url is not None and self.db_given:
            raise InvalidInput(
                "give --db (the database) or --url (a lockstep server), not both; unset LOCKSTEP_DB "
                "or LOCKSTEP_URL if one comes from the environment"
            )

    @property
    def opened(self) -> bool:
        """Whether a command has opened the engine or the client (the target is then fixed)."""
        return self._engine is not None or self._client is not None

    def close(self) -> None:
        """Close the engine if a command opened it (the root group calls this when the command ends)."""
        if self._engine is not None:
            self._engine.close()
        if self._client is not None:
            self._client.close()


def cli_user() -> str:
    """Who is at the keyboard, for the audit log, holds and repairs: $USER, else the login name
    ($LOGNAME, the account's name), or "cli" where none can be found (a container without a passwd
    entry)."""
    if user := os.environ.get("USER"):
        return user
    try:
        return getpass.getuser() or "cli"
    except (KeyError, OSError):
        return "cli"


pass_ctx = click.make_pass_decorator(Ctx)
