"""The storage port's exceptions: what a store raises that the application layer must tell apart (a
lost race to retry, a locked row to skip, a database out of reach, a schema this build cannot use).
A leaf: the other modules of the port and both backends import it, it imports nothing."""

from __future__ import annotations

__all__ = ["ConcurrencyError", "RowLocked", "SchemaError", "StoreUnavailable"]


class ConcurrencyError(Exception):
    """Another writer appended first (expected sequence did not match, or a unique key was taken)."""


class RowLocked(Exception):
    """Another transaction holds the row; skip it now and come back later."""


class StoreUnavailable(Exception):
    """The database cannot be reached or stayed locked past the busy timeout."""


class SchemaError(Exception):
    """The database schema is not the one this build needs (message says what to run)."""
