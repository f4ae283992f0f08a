"""The state every command receives: the global options and the engine, opened on first use."""

from __future__ import annotations

import getpass
import os

import click

from ..core.limits import DEFAULT_SERVER_LIMITS, ServerLimits
from ..engine import Engine

__all__ = ["Ctx", "cli_user", "pass_ctx"]


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

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = Engine.open(self.db, server_limits=self.limits, keys=self.key_file)
        return self._engine

    @property
    def opened(self) -> bool:
        """Whether a command has opened the engine (the database and keys are then fixed)."""
        return self._engine is not None

    def close(self) -> None:
        """Close the engine if a command opened it (the root group calls this when the command ends)."""
        if self._engine is not None:
            self._engine.close()


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
