"""The runs aggregate: runs, their events and snapshots (implemented by sqltx/runs.py). `LoadedRun` is a
run as a command loads it, stored and clear state; `RunsTx.append` is the write path of every command."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, cast

from ...core.effects import Effect
from ...core.events import Event
from ...core.state import RunState
from .errors import CorruptRow

__all__ = ["DamagedRun", "LoadedRun", "RunsTx"]


class LoadedRun:
    """A run as loaded for a command: `stored`, the snapshot as written (a sealed value is a marker:
    core/sealed.py), and `state`, the clear state decisions are made on: the same object when nothing is
    sealed. A sealed run's clear state is opened on first use, inside the transaction that loaded it
    (reads that only show the run, which use `stored`, never open anything)."""

    __slots__ = ("_open", "_state", "last_hash", "stored")

    def __init__(
        self,
        state: RunState | None,
        last_hash: str,
        *,
        stored: RunState | None = None,
        opener: Callable[[], RunState] | None = None,
    ) -> None:
        if state is None and (stored is None or opener is None):
            raise ValueError("a LoadedRun needs its state, or its stored state and an opener")
        self._state = state
        self.stored: RunState = cast(RunState, stored if stored is not None else state)
        self.last_hash = last_hash
        self._open = opener

    @property
    def state(self) -> RunState:
        if self._state is None:
            self._state = cast(Callable[[], RunState], self._open)()
        return self._state

    @property
    def sealed(self) -> bool:
        """Whether the stored state holds sealed values (then it is not the clear state)."""
        return self._open is not None or self.stored is not self._state


class DamagedRun(CorruptRow):
    """A run the background scrub marked damaged (app/scrub.py): its rows still decode, but `verify`
    found them not to be what was written (`problem`). Every command on it is refused; `loaded` is the
    run as stored, for the views that say why (never for a decision)."""

    def __init__(self, run_id: str, problem: str, loaded: LoadedRun) -> None:
        super().__init__(run_id, None, problem)
        self.args = (f"run {run_id} was found damaged by the background scrub: {problem}",)
        self.problem = problem
        self.loaded = loaded


class RunsTx(Protocol):
    def load_run(self, run_id: str, *, skip_locked: bool = False) -> LoadedRun | None: ...
    def load_runs(self, run_ids: Sequence[str], *, skip_locked: bool = False) -> dict[str, LoadedRun]: ...
    def run_by_key(self, tenant: str, start_key: str) -> tuple[str, str | None] | None: ...
    def runs_with_prefix(self, tenant: str, prefix: str, limit: int) -> list[str]:
        """The tenant's run ids that begin with `prefix` (lowercase hex), in order, at most `limit`."""
        ...

    def runs_to_scrub(self, after: str, limit: int) -> list[tuple[str, str]]:
        """(run id, tenant) of the next `limit` runs after the id `after` that are not marked damaged,
        in run-id order: the background scrub's round robin over every tenant."""
        ...

    def mark_damaged(self, run_id: str, problem: str) -> bool:
        """Mark the run damaged with `problem` (what verify found); False if it was marked already or
        is gone. Loading it then raises DamagedRun."""
        ...

    def append(
        self,
        before: LoadedRun | None,
        after: RunState,
        events: Sequence[Event],
        effects: Sequence[Effect],
        *,
        now_ms: int,
        request_digest: str | None = None,
        lease_until_ms: int | None = None,
        clear: RunState | None = None,
    ) -> None:
        """Append `events` after `before` (or create the run), write the snapshot `after` and apply
        `effects`; an attempt leased by these events holds its lease until `lease_until_ms` (else its
        deadline). Events, `after` and effects are the stored (sealed) forms; `clear` is the clear
        state when it differs (kept in the process's state cache, never written)."""
        ...

    def runs(
        self,
        tenant: str,
        *,
        status: str | None,
        definition: str | None,
        after: str,
        limit: int,
        before: str | None = None,
    ) -> list[RunState]: ...
    def run_ids(self, tenant: str | None) -> list[str]: ...
    def events(self, run_id: str) -> list[tuple[Event, str]]: ...
    def active_runs(self, tenant: str) -> int: ...
