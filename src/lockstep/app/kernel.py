"""The kernel of the application layer: one command = one transaction.

load -> decide (pure) -> append events with the expected sequence + snapshot + outbox rows -> commit.
Every feature service (runs, work, reports, sweeps, approvals, repairs, principals) is built on these
few calls: transactions, the clock, apply/command, the definitions, the tenants' settings, and the
listeners that see committed events. Nothing here knows a feature.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Concatenate, Literal, ParamSpec, TypeVar

import msgspec

from ..core.canonical import JSONObject, JSONValue, compact_json
from ..core.commands import Command, Rejected, ReportFailure, ReportSuccess
from ..core.decide import decide
from ..core.definition import Definition, Limits, parse_definition
from ..core.effects import effects_of
from ..core.events import Event
from ..core.evolve import evolve
from ..core.exprcheck import STORED_EXPR_LIMITS
from ..core.limits import DEFAULT_SERVER_LIMITS, SERVER_LIMITS, TENANT_LIMITS, ServerLimits, Settings
from ..core.pointer import parse_pointer
from ..core.sealed import SEALED, contains_marker, label_of, maybe_sealed, pointer_get, pointer_set
from ..core.sensitive import batch_pointers
from ..core.shape import Shape
from ..core.state import RunState
from ..errors import Conflict, Gone, InvalidInput, LockstepError, NotFound, Refused, Unavailable
from ..store import (
    ConcurrencyError,
    CorruptRow,
    DamagedRun,
    LoadedRun,
    RetentionTx,
    RowLocked,
    Sealer,
    Store,
    StoreUnavailable,
    Tx,
)
from ..store.port import ApplyTx, BatchTx, DefinitionsTx, RunsTx, SealTx, TenantsTx, TxControl
from . import failpoints
from .quotas import check_value

__all__ = ["STORED", "Kernel", "Listener", "Observer", "epoch_ms", "lock_run", "refuse_reserved", "utcnow"]

log = logging.getLogger("lockstep.app.kernel")
T = TypeVar("T")
X = TypeVar("X", bound=TxControl)
P = ParamSpec("P")

# Called with (state after, events) for every committed command (metrics, logs, waking workers).
Listener = Callable[[RunState, list[Event]], None]
# Called with (state before, state after, events) for every committed command (tracing: a span's start
# is in the state before the event that ends it). States and events are the stored form.
Observer = Callable[[RunState | None, RunState, list[Event]], None]

# Stored versions were valid when published; limits changed since must not make them unrunnable.
STORED = Limits(
    max_steps=10_000,
    max_wait=timedelta(days=36_500),
    max_timeout=timedelta(days=36_500),
    max_attempts=1_000_000,
    expressions=STORED_EXPR_LIMITS,
    max_sensitive_pointers=SERVER_LIMITS["max_sensitive_pointers"].ceiling,
    max_pointer_length=SERVER_LIMITS["max_pointer_length"].ceiling,
    publish_checks=False,
    max_branch_depth=TENANT_LIMITS["max_branch_depth"].ceiling,
    max_items=TENANT_LIMITS["max_items"].ceiling,
    max_expanded_steps=10**9,
    max_active_attempts=10**9,
)


def utcnow() -> datetime:
    return datetime.now(UTC)


def epoch_ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def lock_run(tx: RunsTx, run_id: str) -> LoadedRun | Literal[False] | None:
    """The run, locked; None if it does not exist; False if another transaction holds it."""
    try:
        return tx.load_run(run_id, skip_locked=True)
    except RowLocked:
        return False


class Kernel:
    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], datetime] = utcnow,
        server_limits: ServerLimits = DEFAULT_SERVER_LIMITS,
    ) -> None:
        self.store = store
        self.clock = clock
        # The server-wide limits (core/limits.py), set once when the process starts: every layer that
        # enforces one (HTTP, YAML, login, metrics, publish, the core's history bounds) reads it here.
        self.server_limits = server_limits
        self.listeners: list[Listener] = []
        self.observers: list[Observer] = []
        # Seals sensitive values and opens them (app/keys; set by the service, shared with the store).
        self.sealer: Sealer | None = getattr(store, "sealer", None)
        # Who cannot decide the approval requests among a decision's events (app/approvers; set by the
        # service): the definition to decide again with, recording it, or None.
        self.approvers: Callable[[ApplyTx, str, Definition, list[Event]], Definition | None] | None = None
        self._definitions: dict[tuple[str, str, int], Definition] = {}
        self._settings: dict[str, tuple[float, Settings]] = {}
        # Per thread: the (before, state, events) of the write transaction in progress, for the listeners.
        self._local = threading.local()

    # --- transactions --------------------------------------------------------------------------
    @contextmanager
    def write(self) -> Iterator[Tx]:
        """A write transaction; listeners see the events only after the commit succeeded."""
        committed: list[tuple[RunState | None, RunState, list[Event]]] = []
        previous = getattr(self._local, "buffer", None)
        self._local.buffer = committed
        try:
            with self.store.write() as tx:
                yield tx
        except StoreUnavailable as exc:
            raise Unavailable(str(exc)) from None
        except CorruptRow as exc:
            raise _corrupt(exc) from None
        finally:
            self._local.buffer = previous
        for before, state, events in committed:
            for listener in list(self.listeners):
                try:
                    listener(state, events)
                except Exception:  # an observer must never break a committed transition
                    log.exception("event listener failed")
            for observer in list(self.observers):
                try:
                    observer(before, state, events)
                except Exception:
                    log.exception("event observer failed")

    @contextmanager
    def read(self) -> Iterator[Tx]:
        try:
            with self.store.read() as tx:
                yield tx
        except StoreUnavailable as exc:
            raise Unavailable(str(exc)) from None
        except CorruptRow as exc:
            raise _corrupt(exc) from None

    def isolated(
        self, tx: X, what: str, fn: Callable[Concatenate[X, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T | None:
        """Run one item of a batch in a savepoint: a broken run (unreadable snapshot, a bug) is logged and
        skipped instead of failing the whole batch, and the next pass tries it again."""
        buffer = getattr(self._local, "buffer", None)
        mark = len(buffer) if buffer is not None else 0
        try:
            with tx.savepoint():
                return fn(tx, *args, **kwargs)
        except Exception:
            log.exception("skipped %s in this pass", what)
            if buffer is not None:
                del buffer[mark:]  # its events were rolled back: listeners must not see them
            return None

    def as_one_batch(
        self,
        tx: BatchTx,
        what: str,
        run_ids: Sequence[str],
        body: Callable[[dict[str, LoadedRun]], T],
        *,
        skip_locked: bool = False,
    ) -> T | None:
        """The optimistic path of a batch (results, claims, timers): in one savepoint, lock and read all
        its runs with one query (run-id order, so two batches cannot deadlock) and run `body(loaded)`
        with every append in one tx.batch(). None if anything in it failed: it was undone, and the
        caller goes item by item, each in its own savepoint, isolating the broken one."""

        def whole(tx: BatchTx) -> T:
            loaded = tx.load_runs(run_ids, skip_locked=skip_locked)
            with tx.batch():
                return body(loaded)

        return self.isolated(tx, what, whole)

    # --- definitions and settings --------------------------------------------------------------
    def definition_for(self, tx: DefinitionsTx, tenant: str, name: str, version: int) -> Definition:
        key = (tenant, name, version)
        d = self._definitions.get(key)
        if d is None:
            row = tx.definition(tenant, name, version)
            if row is None:
                raise NotFound(f"definition {name} version {version} not found in tenant {tenant}")
            # Versions are immutable, so a compiled definition can be cached forever.
            d = parse_definition(row.document, STORED)
            self._definitions[key] = d
        return d

    def definition_of(self, tx: DefinitionsTx, state: RunState) -> Definition:
        """The definition version `state`'s run is on."""
        return self.definition_for(tx, state.tenant, state.definition["name"], state.definition["version"])

    def definition(self, tenant: str, name: str, version: int) -> Definition:
        """A definition version, from the cache or else in a read of its own."""
        d = self._definitions.get((tenant, name, version))
        if d is None:
            with self.read() as tx:
                d = self.definition_for(tx, tenant, name, version)
        return d

    def settings_of(self, tenant: str, tx: TenantsTx | None = None, *, fresh: bool = False) -> Settings:
        """A tenant's settings, cached for a few seconds: read on every command, changed rarely (read
        in `tx`, or in a read of its own; `fresh` reads them now)."""
        now = time.monotonic()
        hit = None if fresh else self._settings.get(tenant)
        if hit is None or now - hit[0] > 5.0:
            if tx is None:
                with self.read() as own:
                    row = own.tenant(tenant)
            else:
                row = tx.tenant(tenant)
            hit = (now, row.settings if row else {})
            self._settings[tenant] = hit
        return hit[1]

    def check_value(
        self, tenant: str, value: object, size_limit: str, what: str, root: str = "value"
    ) -> Shape:
        """quotas.check_value with the tenant's settings. They are cached for a few seconds, so a refusal
        is checked again with settings read fresh: a limit raised a moment ago is never refused by.
        A value holding a `$sealed` object is refused: that key is reserved for sealed values."""
        try:
            shape = check_value(self.settings_of(tenant), tenant, value, size_limit, what, root)
        except InvalidInput:
            shape = check_value(self.settings_of(tenant, fresh=True), tenant, value, size_limit, what, root)
        refuse_reserved(value, what)
        return shape

    # --- commands ------------------------------------------------------------------------------
    def apply(
        self,
        tx: ApplyTx,
        loaded: LoadedRun | None,
        command: Command,
        now: datetime,
        definition: Definition,
        request_digest: str | None = None,
        then: Callable[[RunState, list[Event]], Command | Sequence[Command] | None] | None = None,
        lease_until: datetime | None = None,
    ) -> tuple[RunState | None, list[Event]]:
        """Decide `command`, and `then` the follow-ups it returns (if any) on the resulting state, and
        append all their events with one run update: the transition and, e.g., the eager claims of the
        attempts it scheduled (the branches of a parallel step: several). A follow-up the core refuses
        is simply not applied."""
        before = loaded.state if loaded else None
        if (
            before is not None
            and isinstance(command, ReportSuccess | ReportFailure)
            and failpoints.enabled("unsafe.no_fencing", task=command.task_id)
        ):
            command = failpoints.without_fencing(before, command)
        tenant = before.tenant if before else getattr(command, "tenant", "")
        max_events = self.settings_of(tenant, tx).get("max_history_events")
        limit = int(max_events) if max_events else None
        events = self._decide(tx, before, command, now, definition, limit)
        if not events:
            return before, []
        after = before
        for e in events:
            after = evolve(after, e)
        if after is None:  # pragma: no cover - events always create or keep a state
            raise RuntimeError("decide produced events but no state")
        follow = then(after, events) if then is not None else None
        for next_command in [follow] if isinstance(follow, Command) else (follow or ()):
            try:
                more = self._decide(tx, after, next_command, now, definition, limit)
            except Rejected:
                more = []
            for e in more:
                after = evolve(after, e)
            events = [*events, *more]
        target = getattr(command, "target", None)  # a migration decides under the version it moves to
        sealed = self._sealed(
            tx, loaded, after, events, definition, target if isinstance(target, Definition) else None
        )
        stored, written = sealed if sealed is not None else (after, events)
        tx.append(
            loaded,
            stored,
            written,
            effects_of(written, child=after.parent is not None),
            now_ms=epoch_ms(now),
            request_digest=request_digest,
            lease_until_ms=epoch_ms(lease_until) if lease_until is not None else None,
            clear=after if sealed is not None else None,
        )
        failpoints.hit(f"commit.{type(command).__name__}", run=after.run_id)  # written, not yet committed
        buffer = getattr(self._local, "buffer", None)
        if buffer is not None:
            # Observers (logs, metrics, traces) see the stored form only.
            buffer.append((loaded.stored if loaded is not None else None, stored, written))
        return after, events

    def _decide(
        self,
        tx: ApplyTx,
        state: RunState | None,
        cmd: Command,
        now: datetime,
        d: Definition,
        limit: int | None,
    ) -> list[Event]:
        """decide; and when its events request an approval its approvers cannot give (per `approvers`,
        set by the service), decide again with what they lack, which the request then records."""
        events = decide(state, cmd, now, d, limit, self.server_limits)
        tenant = state.tenant if state is not None else getattr(cmd, "tenant", "")
        noted = self.approvers(tx, tenant, d, events) if self.approvers is not None else None
        return events if noted is None else decide(state, cmd, now, noted, limit, self.server_limits)

    def _sealed(
        self,
        tx: ApplyTx,
        loaded: LoadedRun | None,
        after: RunState,
        events: list[Event],
        definition: Definition,
        target: Definition | None = None,
    ) -> tuple[RunState, list[Event]] | None:
        """The stored form of a transition (its snapshot and events) when its definition declares
        sensitive fields or the run holds sealed values already; None (the clear form is the stored
        one, at no cost) otherwise. Each sensitive value becomes a marker under the run's key; the
        stored snapshot is the fold of the stored events over the stored snapshot before."""
        classified = definition.sensitivity.any or (target is not None and target.sensitivity.any)
        was_sealed = loaded is not None and loaded.sealed
        if not classified and not was_sealed:
            return None
        found: list[tuple[int, str, str, JSONValue]] = []  # (event index, pointer, label, clear value)
        datas: dict[int, JSONObject] = {}
        pointers = batch_pointers([e.data for e in events], definition, target) if classified else []
        for i, e in enumerate(events if classified else ()):
            for pointer in pointers[i]:
                data = datas.setdefault(i, e.data_json())
                present, value = pointer_get(data, pointer)
                if present:
                    found.append((i, pointer, label_of(e.type, pointer), value))
        written = list(events)
        if found:
            if self.sealer is None:  # pragma: no cover - the service always sets one
                raise Refused("this process cannot seal sensitive values (no key ring)", code="no_key")
            values = [(f[2], f[3]) for f in found]
            markers = self.sealer.seal(tx, after.tenant, after.run_id, values, new=loaded is None)
            fields: dict[int, set[str]] = {}
            for (i, pointer, _label, _value), marker in zip(found, markers, strict=True):
                datas[i] = pointer_set(datas[i], pointer, marker)
                fields.setdefault(i, set()).add(parse_pointer(pointer)[0])  # the record's field
            for i, changed in fields.items():
                e = written[i]
                # The record with the sealed fields in place (unvalidated: a marker may stand where
                # the record types a string; reading it back keeps it as stored, see core/events.py).
                record = msgspec.structs.replace(e.data, **{f: datas[i][f] for f in changed})
                written[i] = Event(record, e.at, e.seq, e.v)
        elif not was_sealed:
            return None  # nothing sensitive in this run so far
        stored = loaded.stored if loaded is not None else None
        for e in written:
            stored = evolve(stored, e)
        if stored is None:  # pragma: no cover - events always create or keep a state
            raise RuntimeError("decide produced events but no state")
        return stored, written

    def opened(self, tx: SealTx, tenant: str, run_id: str, value: JSONValue) -> JSONValue:
        """`value` (stored: e.g. a task's input) with the run's sealed values opened, for a hand-over to
        the activity that needs them in clear."""
        if self.sealer is None:
            raise Refused(f"run {run_id} holds sealed values and this process has no key", code="no_key")
        return self.sealer.open(tx, tenant, run_id, value)

    def command(
        self,
        run_id: str,
        command: Command,
        tenant: str | None = None,
        prepare: Callable[[Tx, LoadedRun], Command] | None = None,
    ) -> tuple[RunState, list[Event]]:
        """Run one command on one run, retrying a lost optimistic race a few times. `prepare` turns the
        command into the one to decide, inside the transaction, from the loaded run (e.g. a result
        bounded by its tenant's limits)."""
        reason = getattr(command, "reason", None)
        if tenant is not None and isinstance(reason, str):
            self.check_value(tenant, reason, "max_payload_bytes", "the reason")
        for _ in range(5):
            now = self.clock()
            try:
                with self.write() as tx:
                    loaded = tx.load_run(run_id)
                    if loaded is None or (tenant is not None and loaded.state.tenant != tenant):
                        raise self.missing(tx, run_id, tenant)
                    d = self.definition_of(tx, loaded.state)
                    decided = prepare(tx, loaded) if prepare is not None else command
                    after, events = self.apply(tx, loaded, decided, now, d)
                    return after or loaded.state, events
            except ConcurrencyError:
                continue
            except Rejected as r:
                raise Refused(r.reason, code=r.code) from None
        raise Conflict(f"run {run_id} is being changed by other writers; try again")

    def state(self, tenant: str | None, run_id: str) -> RunState:
        """The run as stored, for read models: a sealed value is a marker (read models redact it). A run
        marked damaged is refused (corrupt_run), like every command on it."""
        s, damaged = self.inspect(tenant, run_id)
        if damaged is not None:
            raise _corrupt(damaged)
        return s

    def inspect(self, tenant: str | None, run_id: str) -> tuple[RunState, DamagedRun | None]:
        """The run as stored, and what the scrub found wrong with it if it marked it damaged: for the
        views that say why a damaged run is refused (`show`), never for a decision."""
        damaged: DamagedRun | None = None
        with self.read() as tx:
            try:
                loaded = tx.load_run(run_id)
            except DamagedRun as exc:
                loaded, damaged = exc.loaded, exc
            if loaded is None or (tenant is not None and loaded.stored.tenant != tenant):
                raise self.missing(tx, run_id, tenant)
        return loaded.stored, damaged

    def missing(self, tx: RetentionTx, run_id: str, tenant: str | None) -> LockstepError:
        """Why a run is not there: Gone, saying when and why, if it was purged (its tombstone); else
        NotFound. Another tenant's run is NotFound either way, so its existence does not leak."""
        where = f" in tenant {tenant}" if tenant else ""
        t = tx.tombstone(run_id)
        if t is None or (tenant is not None and t.tenant != tenant):
            return NotFound(f"run {run_id} not found{where}")
        return Gone(
            f"run {run_id}{where} was purged at {t.purged_at} by {t.purged_by}: {t.reason}. It ended "
            f"{t.status} at {t.finished_at} after {t.events} events; only its tombstone is kept "
            "(`lockstep retention tombstones`)",
            code="purged",
            extra={
                "purged_at": t.purged_at,
                "purged_by": t.purged_by,
                "reason": t.reason,
                "run_status": t.status,  # "status" is the problem document's HTTP status
                "finished_at": t.finished_at,
                "events": t.events,
                "last_hash": t.last_hash,
            },
        )


def refuse_reserved(value: JSONValue, what: str) -> None:
    """InvalidInput for a value holding an object with the key `$sealed`: only sealed values may."""
    if isinstance(value, dict | list) and maybe_sealed(compact_json(value)) and contains_marker(value):
        raise InvalidInput(
            f"{what} holds an object with the key {SEALED!r}, which is reserved for sealed values; "
            "rename that key",
            code="reserved_key",
        )


def _corrupt(exc: CorruptRow) -> Refused:
    """One damaged run refuses every command and read that needs the damaged row; the rest go on."""
    repair = "the database" if not isinstance(exc, DamagedRun) else "the run's rows (its run row and events)"
    return Refused(
        f"{exc}; nothing was changed. `lockstep verify {exc.run_id}` shows what is wrong; restore "
        f"{repair} from a backup to repair it",
        code="corrupt_run",
    )
