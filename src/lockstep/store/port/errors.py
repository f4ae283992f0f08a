"""The storage port's exceptions: what a store raises that the application layer must tell apart (a
lost race to retry, a locked row to skip, a database out of reach, a schema this build cannot use).
A leaf: the other modules of the port and both backends import it, it imports nothing."""

from __future__ import annotations

__all__ = ["ConcurrencyError", "CorruptRow", "RowLocked", "SchemaError", "StoreUnavailable"]


class ConcurrencyError(Exception):
    """Another writer appended first (expected sequence did not match, or a unique key was taken)."""


class RowLocked(Exception):
    """Another transaction holds the row; skip it now and come back later."""


class StoreUnavailable(Exception):
    """The database cannot be reached or stayed locked past the busy timeout."""


class SchemaError(Exception):
    """The database schema is not the one this build needs (message says what to run)."""


class CorruptRow(Exception):
    """A stored row of a run cannot be decoded (a byte changed on disk or by hand): that run cannot be
    used until it is repaired; `seq` is the event's, None for the run's snapshot."""

    def __init__(self, run_id: str, seq: int | None, reason: str) -> None:
        where = f"event seq {seq}" if seq is not None else "snapshot"
        super().__init__(f"run {run_id}: its stored {where} cannot be decoded ({reason})")
        self.run_id = run_id
        self.seq = seq
