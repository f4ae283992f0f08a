"""lockstep: a durable workflow engine for tenant-defined processes.

Public API: Engine (open a database, publish, start, show, cancel, run workers), the `activity`
decorator, ActivityContext (what an activity receives) and ActivityError (fail with a code).
"""

from typing import TYPE_CHECKING

from . import _deferred  # noqa: F401  (first: it defers the cel shell before anything imports cel)
from .errors import LockstepError
from .runtime.activity import ActivityContext, ActivityError, LeaseLost, Registry, activity

if TYPE_CHECKING:
    from .engine import Engine

    __version__: str

__all__ = ["ActivityContext", "ActivityError", "Engine", "LeaseLost", "LockstepError", "Registry", "activity"]


def __getattr__(name: str) -> object:
    if name == "__version__":
        # One place for the version: pyproject.toml, as installed (a wheel, or the editable checkout);
        # read on first use, since importlib.metadata costs every process 70 ms at start-up.
        from importlib.metadata import version  # noqa: PLC0415

        return version("lockstep")
    # The engine (the store and the application layer) loads on first use, not with the package: a
    # program that only uses lockstep.client or registers activities does not pay for it.
    if name == "Engine":
        from .engine import Engine  # noqa: PLC0415

        return Engine
    raise AttributeError(f"module 'lockstep' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "Engine"})
