"""A small cache of the run states this process wrote last, so the next transition of a run it just
advanced (a worker's next step, eagerly leased) skips parsing the snapshot JSON back into objects.
Only runs with a leased attempt are kept (their next command, the result, comes soon); a few MiB at most."""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..core.state import RunState

__all__ = ["StateCache"]


class StateCache:
    """Run states by run id, each with the hash-chain head it was written under.

    An entry is only used when the row's `last_hash` is the one it was stored with: the head covers
    every event of the run, and a state is the fold of its events, so equal heads mean equal states.
    That makes a stale entry (a rolled-back write, another process moving the run on) harmless: it is
    just not used. Bounded, so process memory stays flat however many runs exist. Write transactions
    only: a read (verify, show) must see the stored snapshot, even one edited by hand."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._entries: OrderedDict[str, tuple[str, RunState, RunState]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run_id: str, last_hash: str) -> tuple[RunState, RunState] | None:
        """(clear state, stored state): the same object twice unless the run holds sealed values."""
        with self._lock:
            entry = self._entries.get(run_id)
            if entry is None or entry[0] != last_hash:
                return None
            self._entries.move_to_end(run_id)
            return entry[1], entry[2]

    def put(self, run_id: str, last_hash: str, state: RunState, stored: RunState | None = None) -> None:
        """Keep `state` (clear) and, for a run with sealed values, its `stored` twin: a sealed run's
        next command then needs neither its snapshot parsed nor its values opened."""
        with self._lock:
            self._entries[run_id] = (last_hash, state, stored if stored is not None else state)
            self._entries.move_to_end(run_id)
            if len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def forget(self, run_id: str) -> None:
        """Drop a run's entry (its key was destroyed: its clear state must not outlive it here)."""
        with self._lock:
            self._entries.pop(run_id, None)

    def __len__(self) -> int:
        return len(self._entries)
