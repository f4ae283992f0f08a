"""lockstep: a durable workflow engine for tenant-defined processes.

Public API: Engine (open a database, publish, start, show, cancel, run workers), the `activity`
decorator, ActivityContext (what an activity receives) and ActivityError (fail with a code).
"""

from importlib.metadata import version

from .engine import Engine
from .errors import LockstepError
from .runtime.activity import ActivityContext, ActivityError, LeaseLost, Registry, activity

__all__ = ["ActivityContext", "ActivityError", "Engine", "LeaseLost", "LockstepError", "Registry", "activity"]

# One place for the version: pyproject.toml, as installed (a wheel, or the editable checkout).
__version__ = version("lockstep")
