"""The application service: every state change is one command in one transaction.

load -> decide (pure) -> append events with the expected sequence + snapshot + outbox rows -> commit.
Entry points (CLI, Python API, workers, scheduler) call only this layer.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from ..core.canonical import canonical_json, digest
from ..core.commands import (
    CancelRun,
    Command,
    Rejected,
    ReportFailure,
    ReportSuccess,
    RetryStep,
    StartRun,
)
from ..core.decide import decide
from ..core.definition import Definition, DefinitionError, Limits, parse_definition
from ..core.effects import effects_of
from ..core.events import Event, chain_hash
from ..core.evolve import evolve, fold
from ..core.explain import explain
from ..core.exprcheck import STORED_EXPR_LIMITS, ExprLimits, expression_limits, publish_limits
from ..core.flow import run_of_task
from ..core.limits import DEFAULT_SERVER_LIMITS, TENANT_LIMITS, ServerLimits, tenant_limit
from ..core.shape import Shape, for_view, measure, over_limit, shape_of
from ..core.state import RunState
from ..core.timeutil import iso
from ..errors import Conflict, InvalidInput, NotFound, RateLimited, Refused, Unavailable
from ..store import ConcurrencyError, DefinitionRow, LoadedRun, Store, StoreUnavailable, TaskRow, Tx
from . import dispatch, failpoints
from .dispatch import TaskLease

__all__ = ["OUTPUT_TOO_LARGE", "Service", "TaskLease", "check_value", "new_run_id", "utcnow"]

log = logging.getLogger("lockstep.app.service")
GENESIS = "0" * 64


# Stored versions were valid when published; limits changed since must not make them unrunnable.
STORED = Limits(
    max_steps=10_000,
    max_wait=timedelta(days=36_500),
    max_timeout=timedelta(days=36_500),
    max_attempts=1_000_000,
    expressions=STORED_EXPR_LIMITS,
)


def _json_digest(value: Any, what: str) -> str:
    """digest(value), or InvalidInput when value is not plain JSON (NaN, infinity, lone surrogates)."""
    try:
        return digest(value)
    except (TypeError, ValueError, UnicodeEncodeError) as exc:
        raise InvalidInput(f"{what} is not valid JSON: {str(exc).splitlines()[0][:200]}") from None


# The failure code of an attempt whose output is over a tenant limit: never retried (it would loop).
OUTPUT_TOO_LARGE = "output_too_large"
_CODES = {"max_json_depth": "too_deep", "max_list_items": "too_many_items"}


def limit_message(tenant: str, what: str, over: tuple[str, int, int, str]) -> str:
    name, found, allowed, at = over
    if name == "max_json_depth":
        found_text = f"nests at least {found} levels of arrays/objects (at {at})"
    elif name == "max_list_items":
        found_text = f"has an array or object of at least {found} elements (at {at})"
    else:
        found_text = f"is {found} bytes as compact JSON"
    ceiling = TENANT_LIMITS[name].ceiling
    if allowed >= ceiling:
        return f"{what} {found_text}, over {name}={ceiling}, the most any tenant may allow; send less"
    return (
        f"{what} {found_text}, over tenant {tenant}'s limit {name}={allowed}; send less, or raise it with "
        f"`lockstep tenants set {tenant} --{name.replace('_', '-')} N` (at most {ceiling})"
    )


def limit_error(tenant: str, what: str, over: tuple[str, int, int, str]) -> InvalidInput:
    name, found, allowed, at = over
    return InvalidInput(
        limit_message(tenant, what, over),
        code=_CODES.get(name, "too_large"),
        extra={"limit": name, "found": found, "allowed": allowed, "at": at or None},
    )


def measured(settings: dict[str, Any], value: Any, size_limit: str, root: str) -> Shape:
    """`value` measured with the tenant's own bounds: a refused value costs at most one encode and a
    walk of what the limits allow (never a walk of a huge value)."""
    return measure(
        value,
        root,
        max_bytes=tenant_limit(settings, size_limit),
        max_depth=tenant_limit(settings, "max_json_depth"),
        max_width=tenant_limit(settings, "max_list_items"),
    )


def check_value(
    settings: dict[str, Any], tenant: str, value: Any, size_limit: str, what: str, root: str = "value"
) -> Shape:
    """Refuse (InvalidInput naming the limit, the size found and the setting that raises it) a value
    over the tenant's `size_limit`, max_json_depth or max_list_items; else its shape."""
    shape = measured(settings, value, size_limit, root)
    over = over_limit(settings, shape, size_limit)
    if over is not None:
        raise limit_error(tenant, what, over)
    return shape


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_run_id(now: datetime) -> str:
    """Time-ordered and unguessable: 48 bits of milliseconds then 80 random bits, as hex."""
    return f"{int(now.timestamp() * 1000):012x}{secrets.token_hex(10)}"


def _ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


class Service:
    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], datetime] = utcnow,
        limits: Limits | None = None,
        server_limits: ServerLimits = DEFAULT_SERVER_LIMITS,
        unserved_after: timedelta = timedelta(hours=1),
    ) -> None:
        self.unserved_after = unserved_after
        self.store = store
        self.clock = clock
        # The server-wide limits (core/limits.py), set once when the process starts: every layer that
        # enforces one (HTTP, YAML, login, metrics, publish, the core's history bounds) reads it here.
        self.server_limits = server_limits
        # Publish-time limits; their expression bounds are the server's unless `limits` sets its own.
        limits = limits or Limits()
        if limits.expressions == ExprLimits():
            limits = replace(limits, expressions=publish_limits(server_limits))
        self.limits = limits
        self._defs: dict[tuple[str, str, int], Definition] = {}
        self._settings_cache: dict[str, tuple[float, dict[str, Any]]] = {}
        self._claim_turn = 0
        self._turn_lock = threading.Lock()
        # Called with (state after, events) for every committed command (metrics, logs).
        self.listeners: list[Callable[[RunState, list[Event]], None]] = []
        # In-process workers (runtime.Worker registers itself): a start may lease its first attempt to
        # one of them in the same transaction (eager dispatch), handed over after the commit.
        self.local_workers: list[Any] = []
        self._local = threading.local()
        # Stale reports answered as ignored without being appended (past HISTORY_LIMITS), per tenant.
        self.unrecorded_results: dict[str, int] = {}

    def count_unrecorded(self, tenant: str) -> None:
        with self._turn_lock:
            self.unrecorded_results[tenant] = self.unrecorded_results.get(tenant, 0) + 1

    # --- plumbing ------------------------------------------------------------------------------
    @contextmanager
    def write(self) -> Iterator[Tx]:
        """A write transaction; listeners see the events only after the commit succeeded."""
        committed: list[tuple[RunState, list[Event]]] = []
        previous = getattr(self._local, "buffer", None)
        self._local.buffer = committed
        try:
            with self.store.write() as tx:
                yield tx
        except StoreUnavailable as exc:
            raise Unavailable(str(exc)) from None
        finally:
            self._local.buffer = previous
        for state, events in committed:
            for listener in list(self.listeners):
                try:
                    listener(state, events)
                except Exception:  # an observer must never break a committed transition
                    log.exception("event listener failed")

    @contextmanager
    def read(self) -> Iterator[Tx]:
        try:
            with self.store.read() as tx:
                yield tx
        except StoreUnavailable as exc:
            raise Unavailable(str(exc)) from None

    def definition_for(self, tx: Tx, tenant: str, name: str, version: int) -> Definition:
        key = (tenant, name, version)
        d = self._defs.get(key)
        if d is None:
            row = tx.definition(tenant, name, version)
            if row is None:
                raise NotFound(f"definition {name} version {version} not found in tenant {tenant}")
            # Versions are immutable, so a compiled definition can be cached forever.
            d = parse_definition(row.document, STORED)
            self._defs[key] = d
        return d

    def apply(
        self,
        tx: Tx,
        loaded: LoadedRun | None,
        command: Command,
        now: datetime,
        definition: Definition,
        request_digest: str | None = None,
        then: Callable[[RunState, list[Event]], Command | None] | None = None,
        lease_until: datetime | None = None,
    ) -> tuple[RunState | None, list[Event]]:
        """Decide `command`, and `then` the follow-up it returns (if any) on the resulting state, and
        append all their events with one run update: the transition and, e.g., the eager claim of the
        attempt it scheduled. A follow-up the core refuses is simply not applied."""
        before = loaded.state if loaded else None
        if (
            before is not None
            and isinstance(command, ReportSuccess | ReportFailure)
            and failpoints.enabled("unsafe.no_fencing", task=command.task_id)
        ):
            command = self.without_fencing(before, command)
        tenant = before.tenant if before else getattr(command, "tenant", "")
        max_events = self._tenant_setting(tx, tenant, "max_history_events")
        limit = int(max_events) if max_events else None
        events = decide(before, command, now, definition, limit, self.server_limits)
        if not events:
            return before, []
        after = before
        for e in events:
            after = evolve(after, e)
        if after is None:  # pragma: no cover - events always create or keep a state
            raise RuntimeError("decide produced events but no state")
        follow = then(after, events) if then is not None else None
        if follow is not None:
            try:
                more = decide(after, follow, now, definition, limit, self.server_limits)
            except Rejected:
                more = []
            for e in more:
                after = evolve(after, e)
            events = [*events, *more]
        tx.append(
            loaded,
            after,
            events,
            effects_of(events),
            now_ms=_ms(now),
            request_digest=request_digest,
            lease_until_ms=_ms(lease_until) if lease_until is not None else None,
        )
        failpoints.hit(f"commit.{type(command).__name__}", run=after.run_id)  # written, not yet committed
        buffer = getattr(self._local, "buffer", None)
        if buffer is not None:
            buffer.append((after, events))
        return after, events

    def _tenant_setting(self, tx: Tx, tenant: str, name: str) -> Any:
        """A tenant setting, cached for a few seconds: read on every command, changed rarely."""
        return self.settings_of(tenant, tx).get(name)

    def settings_of(self, tenant: str, tx: Tx | None = None) -> dict[str, Any]:
        """A tenant's settings, cached for a few seconds (read in `tx`, or in a read of its own)."""
        now = time.monotonic()
        hit = self._settings_cache.get(tenant)
        if hit is None or now - hit[0] > 5.0:
            if tx is None:
                with self.read() as own:
                    row = own.tenant(tenant)
            else:
                row = tx.tenant(tenant)
            hit = (now, row.settings if row else {})
            self._settings_cache[tenant] = hit
        return hit[1]

    def check_value(self, tenant: str, value: Any, size_limit: str, what: str, root: str = "value") -> Shape:
        """check_value with the tenant's settings. They are cached for a few seconds, so a refusal is
        checked again with settings read fresh: a limit raised a moment ago is never refused by."""
        try:
            return check_value(self.settings_of(tenant), tenant, value, size_limit, what, root)
        except InvalidInput:
            self._settings_cache.pop(tenant, None)
            return check_value(self.settings_of(tenant), tenant, value, size_limit, what, root)

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
                        raise NotFound(f"run {run_id} not found" + (f" in tenant {tenant}" if tenant else ""))
                    d = self.definition_for(
                        tx,
                        loaded.state.tenant,
                        loaded.state.definition["name"],
                        loaded.state.definition["version"],
                    )
                    decided = prepare(tx, loaded) if prepare is not None else command
                    after, events = self.apply(tx, loaded, decided, now, d)
                    return after or loaded.state, events
            except ConcurrencyError:
                continue
            except Rejected as r:
                raise Refused(r.reason, code=r.code) from None
        raise Conflict(f"run {run_id} is being changed by other writers; try again")

    # --- definitions ---------------------------------------------------------------------------
    def publish(self, tenant: str, document: Any) -> dict[str, Any]:
        limits = self.limits
        with self.read() as tx:
            row = tx.tenant(tenant)
        if row is not None and "max_steps" in row.settings:
            limits = replace(limits, max_steps=int(row.settings["max_steps"]))
        if row is not None:  # expression costs are bounded on this tenant's data bounds
            limits = replace(limits, expressions=expression_limits(limits.expressions, row.settings))
        try:
            d = parse_definition(document, limits)
        except DefinitionError as exc:
            raise InvalidInput(str(exc)) from None
        for _ in range(3):
            try:
                with self.write() as tx:
                    same = tx.definition_by_digest(tenant, d.name, d.digest)
                    if same is not None:
                        return {"name": d.name, "version": same.version, "digest": d.digest, "created": False}
                    latest = tx.definition(tenant, d.name, None)
                    version = (latest.version if latest else 0) + 1
                    tx.insert_definition(
                        tenant, DefinitionRow(d.name, version, d.digest, d.document), iso(self.clock())
                    )
                    return {"name": d.name, "version": version, "digest": d.digest, "created": True}
            except ConcurrencyError:
                continue
        raise Conflict(f"definition {d.name} is being published concurrently; try again")

    def definition_document(self, tenant: str, name: str, version: int) -> dict[str, Any]:
        with self.read() as tx:
            row = tx.definition(tenant, name, version)
        if row is None:
            raise NotFound(f"no definition {name} version {version} in tenant {tenant}")
        return {"name": row.name, "version": row.version, "digest": row.digest, "document": row.document}

    def definitions(self, tenant: str) -> list[dict[str, Any]]:
        with self.read() as tx:
            return tx.definitions(tenant)

    # --- runs ----------------------------------------------------------------------------------
    def start(
        self,
        tenant: str,
        name: str,
        *,
        input: Any = None,
        key: str | None = None,
        version: int | None = None,
        actor: str | None = None,
    ) -> dict[str, Any]:
        """Start a run; with `key`, the same key returns the same run (and a different request is refused)."""
        payload = {} if input is None else input
        # Measured before the transaction (which compares again with the settings it reads).
        shape = self.check_value(tenant, payload, "max_input_bytes", "the run input", "input")
        request = _json_digest({"definition": name, "version": version, "input": payload}, "the run input")
        for _ in range(5):
            now = self.clock()
            try:
                eager = dispatch.local_eager(self)
                with self.write() as tx:
                    if key is not None:
                        found = tx.run_by_key(tenant, key)
                        if found is not None:
                            if found[1] != request:
                                raise Conflict(
                                    f"start key {key!r} was already used for a different request "
                                    f"(run {found[0]}); use a new key",
                                    code="key_reused",
                                )
                            return {"run_id": found[0], "created": False}
                    run_id = self._start_in(
                        tx, now, tenant, name, version, payload, key, actor, request, shape, eager
                    )
                if eager is not None and eager.leases:
                    eager.owner.accept(eager.leases)  # committed: the first attempt may run now
                return {"run_id": run_id, "created": True}
            except ConcurrencyError:
                continue
            except Rejected as r:
                raise InvalidInput(r.reason, code=r.code) from None
        raise Conflict("could not start the run because of concurrent writers; try again")

    def start_many(
        self, tenant: str, name: str, inputs: Sequence[Any], *, actor: str | None = None
    ) -> list[str]:
        """Start one run per input in ONE transaction (bulk loads, backfills): all start or none do.
        Each run passes the same checks and tenant limits as `start`; no start keys."""
        payloads = [{} if data is None else data for data in inputs]
        shapes = [
            self.check_value(tenant, data, "max_input_bytes", f"run input #{i}", "input")
            for i, data in enumerate(payloads)
        ]
        requests = [
            _json_digest({"definition": name, "version": None, "input": data}, "the run input")
            for data in inputs
        ]
        now = self.clock()
        try:
            with self.write() as tx:
                return [
                    self._start_in(tx, now, tenant, name, None, data, None, actor, request, shape)
                    for data, request, shape in zip(payloads, requests, shapes, strict=True)
                ]
        except Rejected as r:
            raise InvalidInput(r.reason, code=r.code) from None

    def _start_in(
        self,
        tx: Tx,
        now: datetime,
        tenant: str,
        name: str,
        version: int | None,
        payload: Any,
        key: str | None,
        actor: str | None,
        request: str,
        shape: Shape,
        eager: Any = None,
    ) -> str:
        settings = self._check_input(tx, tenant, shape)
        row = tx.definition(tenant, name, version)
        if row is None:
            known = [x["name"] for x in tx.definitions(tenant)]
            what = f"{name} version {version}" if version else name
            hint = f" (published: {', '.join(sorted(set(known)))})" if known else " (none published)"
            raise NotFound(
                f"no definition {what} in tenant {tenant}{hint}; "
                "publish it first with `lockstep publish FILE`"
            )
        d = self.definition_for(tx, tenant, name, row.version)
        self._admit(tx, tenant, now)
        run_id = new_run_id(now)
        max_run = settings.get("max_run_seconds")
        cmd = StartRun(
            run_id, tenant, row.version, payload, key, actor, int(float(max_run) * 1000) if max_run else None
        )
        if eager is None:
            self.apply(tx, None, cmd, now, d, request_digest=request)
            return run_id
        after, events = self.apply(
            tx,
            None,
            cmd,
            now,
            d,
            request_digest=request,
            then=lambda st, evs: eager.follow(self, tx, now, st, evs),
            lease_until=now + eager.lease_ttl,
        )
        if after is not None:
            eager.leased(tx, now, after, events)
        return run_id

    def _check_input(self, tx: Tx, tenant: str, shape: Shape) -> dict[str, Any]:
        """The tenant's settings, read fresh in the start's transaction, after refusing an input over its
        limits (the input was measured before the transaction: nothing is walked while it is open)."""
        row = tx.tenant(tenant)
        settings = row.settings if row else {}
        over = over_limit(settings, shape, "max_input_bytes")
        if over is not None:
            raise limit_error(tenant, "the run input", over)
        return settings

    def _admit(self, tx: Tx, tenant: str, now: datetime) -> None:
        """Tenant limits at the edge, inside the start transaction: refused starts write nothing."""
        row = tx.tenant(tenant)
        if row is None:
            return
        if {"max_active_runs", "max_timers", "starts_per_second"} & row.settings.keys():
            # Count under the tenant's row lock: two concurrent starts must not both see room for one
            # more (READ COMMITTED on PostgreSQL; found by the quota_exhausted fault scenario).
            tx.lock_tenant(tenant)
            row = tx.tenant(tenant) or row
        cap = row.settings.get("max_active_runs")
        if cap is not None:
            active = tx.active_runs(tenant)
            if active >= cap:
                raise RateLimited(
                    f"tenant {tenant} has {active} active runs, its limit (max_active_runs={cap}); "
                    f"start again when some have finished",
                    retry_after=5.0,
                    code="too_many_active_runs",
                )
        max_timers = row.settings.get("max_timers")
        if max_timers is not None:
            armed = tx.scheduled_timers(tenant)
            if armed >= max_timers:
                raise RateLimited(
                    f"tenant {tenant} has {armed} durable timers armed, its limit "
                    f"(max_timers={max_timers}); start again when some have fired",
                    retry_after=30.0,
                    code="too_many_timers",
                )
        rate = row.settings.get("starts_per_second")
        if rate is not None:
            capacity = max(1.0, 2.0 * rate)
            now_ms = _ms(now)
            tokens = capacity if row.bucket_tokens is None else row.bucket_tokens
            if row.bucket_at_ms is not None:
                tokens = min(capacity, tokens + max(0, now_ms - row.bucket_at_ms) / 1000 * rate)
            if tokens < 1.0:
                raise RateLimited(
                    f"tenant {tenant} is starting runs faster than its limit (starts_per_second={rate})",
                    retry_after=(1.0 - tokens) / rate,
                    code="start_rate_exceeded",
                )
            tx.update_tenant_bucket(tenant, tokens - 1.0, now_ms)

    def cancel(self, tenant: str, run_id: str, reason: str, actor: str | None = None) -> dict[str, Any]:
        if not reason or not reason.strip():
            raise InvalidInput("a reason is required to cancel a run (--reason TEXT)")
        state, events = self.command(run_id, CancelRun(reason.strip(), actor), tenant)
        return {"run_id": run_id, "status": state.status, "accepted": bool(events)}

    def state(self, tenant: str | None, run_id: str) -> RunState:
        with self.read() as tx:
            loaded = tx.load_run(run_id)
        if loaded is None or (tenant is not None and loaded.state.tenant != tenant):
            raise NotFound(f"run {run_id} not found" + (f" in tenant {tenant}" if tenant else ""))
        return loaded.state

    def show(self, tenant: str | None, run_id: str) -> dict[str, Any]:
        return self.describe(self.state(tenant, run_id))

    def describe(self, s: RunState) -> dict[str, Any]:
        now = self.clock()
        why = explain(s, now)
        steps = {}
        for sid, st in sorted(s.steps.items(), key=lambda kv: self._step_rank(s, kv[0])):
            steps[sid] = {
                "status": st.status,
                "attempts": st.attempts,
                "output": for_view(st.output),
                "error": for_view(st.error),
                # What an operator looks the effect up with downstream (unknown outcomes, repairs).
                "idempotency_key": st.idempotency_key,
                "started_at": st.started_at,
                "finished_at": st.finished_at,
            }
            if st.compensation is not None:
                steps[sid]["compensation"] = for_view(st.compensation)
        return {
            "run_id": s.run_id,
            "tenant": s.tenant,
            "status": s.status,
            "definition": s.definition,
            "current_step": s.current_step,
            **why,
            # Every value as the views show it: what no limit could accept is a marker, never a 500.
            "input": for_view(s.input),
            "output": for_view(s.output),
            "error": for_view(s.error),
            "steps": steps,
            "started_at": s.started_at,
            "updated_at": s.updated_at,
            "finished_at": s.finished_at,
            "cancel": s.cancel,
            "attention": s.attention,
            "seq": s.seq,
            "start_key": s.start_key,
            "ignored_results": s.ignored_results,
        }

    def _step_rank(self, s: RunState, step_id: str) -> int:
        """Steps are shown in definition order (snapshots store them keyed, hence unordered)."""
        key = (s.tenant, s.definition["name"], s.definition["version"])
        d = self._defs.get(key)
        if d is None:
            with self.read() as tx:
                d = self.definition_for(tx, *key)
        return d.index.get(step_id, len(d.index))

    def events(self, tenant: str | None, run_id: str) -> list[dict[str, Any]]:
        self.state(tenant, run_id)
        with self.read() as tx:
            rows = tx.events(run_id)
        out = []
        for e, _h in rows:
            item: dict[str, Any] = {"seq": e.seq, "type": e.type, "at": e.at}
            data = e.data_json()
            if "step" in data:
                item["step"] = data["step"]
            if "attempt" in data:
                item["attempt"] = data["attempt"]
            item["data"] = for_view(data)
            out.append(item)
        return out

    def runs(
        self,
        tenant: str,
        *,
        status: str | None = None,
        definition: str | None = None,
        after: str = "",
        limit: int = 100,
        before: str | None = None,
        wait_kind: str | None = None,
    ) -> list[dict[str, Any]]:
        """Runs of a tenant: ascending after `after`, or newest first below `before` ("" = from the top).

        `wait_kind` filters on why a run waits (queued, running, timer, retry, attention, ...)."""
        out: list[dict[str, Any]] = []
        cursor_after, cursor_before = after, before
        while len(out) < limit:
            with self.read() as tx:
                page = tx.runs(
                    tenant,
                    status=status,
                    definition=definition,
                    after=cursor_after,
                    limit=limit,
                    before=cursor_before,
                )
            for s in page:
                shown = self.describe(s)
                if wait_kind is None or shown["wait_kind"] == wait_kind:
                    out.append(shown)
            if len(page) < limit or wait_kind is None:
                break
            if cursor_before is not None:
                cursor_before = page[-1].run_id
            else:
                cursor_after = page[-1].run_id
        return out[:limit]

    # --- workers -------------------------------------------------------------------------------
    def claim(
        self,
        worker: str,
        activities: Sequence[str],
        *,
        limit: int,
        lease_ttl: timedelta,
        tenant: str | None = None,
        queue: str = "default",
        versions: Sequence[str] | None = None,
    ) -> list[TaskLease]:
        """Lease up to `limit` ready tasks in one transaction; each lease appends ActivityStarted."""
        return dispatch.claim(
            self,
            worker,
            activities,
            limit=limit,
            lease_ttl=lease_ttl,
            tenant=tenant,
            queue=queue,
            versions=versions,
        )

    def abandon_leases(self, worker: str) -> int:
        """A worker restarting under the same id gives up the leases of its dead previous incarnation:
        they expire now (the scheduler retries them at once) instead of after their lease time."""
        with self.write() as tx:
            return tx.abandon_leases(worker, _ms(self.clock()))

    def heartbeat(self, task_id: str, fencing: int, lease_ttl: timedelta) -> bool:
        """Extend a lease (never past the attempt's deadline); False if the lease is no longer ours."""
        with self.write() as tx:
            return tx.heartbeat(task_id, fencing, _ms(self.clock() + lease_ttl))

    def task(self, task_id: str, tenant: str | None = None) -> TaskRow:
        with self.read() as tx:
            t = tx.task(task_id)
        if t is None or (tenant is not None and t.tenant != tenant):
            raise NotFound(f"task {task_id} not found")
        return t

    def _report(self, task_id: str, command: ReportSuccess | ReportFailure, tenant: str | None = None) -> str:
        """Record one worker's result in ONE transaction: the run is the task id's prefix, its tenant
        (and so the limits the result is bounded by) is read with the run it locks."""
        shape = (
            shape_of(command.output, "output", "max_output_bytes")
            if isinstance(command, ReportSuccess)
            else None
        )
        recorded: list[tuple[str, ReportSuccess | ReportFailure]] = []

        def bounded(tx: Tx, loaded: LoadedRun) -> Command:
            report = self.bounded_report(tx, loaded.state.tenant, command, shape)
            recorded.append((loaded.state.tenant, report))
            return report

        try:
            _state, events = self.command(run_of_task(task_id), command, tenant, prepare=bounded)
        except NotFound:
            raise NotFound(f"task {task_id} not found") from None
        except Refused as exc:
            if exc.code != "result_ignored":
                raise
            self.count_unrecorded(recorded[-1][0])  # a stale report past the bound: answered, not appended
            return "ignored"
        if events and events[0].type == "ResultIgnored":
            return "ignored"
        report = recorded[-1][1]
        if isinstance(report, ReportFailure) and isinstance(command, ReportSuccess):
            # Recorded as a failure: the worker must hear why its result was not taken.
            raise InvalidInput(report.message, code=OUTPUT_TOO_LARGE)
        return "accepted"

    def bounded_report(
        self, tx: Tx, tenant: str, report: ReportSuccess | ReportFailure, shape: Shape | None
    ) -> ReportSuccess | ReportFailure:
        """`report` as the tenant's limits let it be recorded, inside its transaction (`shape` was
        measured before it, up to the ceilings). An output over the limits fails the attempt with
        OUTPUT_TOO_LARGE, not retryable: the activity would return the same output again and the run
        would loop. An error message is cut to fit max_output_bytes (a failure is always recordable)."""
        settings = self.settings_of(tenant, tx)
        if isinstance(report, ReportSuccess):
            if shape is None or over_limit(settings, shape, "max_output_bytes") is None:
                return report
            self._settings_cache.pop(tenant, None)  # refuse only by settings read now
            settings = self.settings_of(tenant, tx)
            over = over_limit(settings, shape, "max_output_bytes")
            if over is None:
                return report
            report = self._output_refused(report, limit_message(tenant, "the activity output", over))
        return self._fit_failure(settings, report)

    def _output_refused(self, report: ReportSuccess, why: str) -> ReportFailure:
        message = f"{why}; the attempt was recorded as failed ({OUTPUT_TOO_LARGE}) and is not retried"
        return self.failure_report(
            report.task_id, report.attempt, report.fencing, OUTPUT_TOO_LARGE, message, retryable=False
        )

    @staticmethod
    def _fit_failure(settings: dict[str, Any], report: ReportFailure) -> ReportFailure:
        # The compact JSON of {"code": ..., "message": ...}: 24 bytes of keys and quotes, and escapes.
        room = tenant_limit(settings, "max_output_bytes") - len(report.code.encode()) - 24
        if len(report.message) * 6 <= room or len(canonical_json(report.message).encode()) <= room:
            return report
        cut = "... (cut to fit max_output_bytes)"
        keep = report.message.encode()[: max(0, room // 6 - len(cut))].decode("utf-8", "ignore")
        return replace(report, message=keep + cut)

    @staticmethod
    def without_fencing(
        state: RunState, command: ReportSuccess | ReportFailure
    ) -> ReportSuccess | ReportFailure:
        """A deliberately broken build (fail point unsafe.no_fencing): the report applies to whatever
        attempt is current, as an engine without fencing tokens would. Only the fault suite uses it,
        to prove its checker catches what fencing prevents."""
        active = state.active
        if active is None or active.fencing is None:
            return command
        return replace(command, task_id=active.task_id, attempt=active.attempt, fencing=active.fencing)

    def success_report(
        self, task_id: str, attempt: int, fencing: int, output: Any, *, strict: bool = False
    ) -> ReportSuccess | ReportFailure:
        """The command reporting `output`. Output that is not plain JSON fails the attempt
        (InvalidOutput) for in-process workers; with `strict` (HTTP workers, who can fix and resend)
        it is refused with InvalidInput instead."""
        try:
            digest(output)
        except RecursionError:
            message = "activity output nests arrays/objects too deep to encode as JSON"
            if strict:
                raise InvalidInput(message) from None
            return self.failure_report(task_id, attempt, fencing, "InvalidOutput", message, retryable=False)
        except (TypeError, ValueError, UnicodeEncodeError) as exc:
            if strict:
                raise InvalidInput(f"output is not valid JSON: {str(exc).splitlines()[0][:200]}") from None
            message = f"activity output is not JSON: {exc}"
            return self.failure_report(task_id, attempt, fencing, "InvalidOutput", message, retryable=False)
        return ReportSuccess(task_id, attempt, fencing, output)

    @staticmethod
    def failure_report(
        task_id: str,
        attempt: int,
        fencing: int,
        code: str,
        message: str,
        *,
        retryable: bool = True,
        unexpected: bool = False,
    ) -> ReportFailure:
        # Error texts come from workers; keep them printable and encodable in the hash chain.
        code = code.encode("utf-8", "replace").decode()[:200]
        message = message.encode("utf-8", "replace").decode()[:2000]
        return ReportFailure(task_id, attempt, fencing, code, message, retryable, unexpected)

    def complete(
        self,
        task_id: str,
        attempt: int,
        fencing: int,
        output: Any,
        *,
        tenant: str | None = None,
        strict: bool = False,
    ) -> str:
        """Report success: "accepted", or "ignored" when the result is stale (recorded as evidence). An
        output over the tenant's limits is recorded as a failed attempt (not retried) and then refused
        with InvalidInput code output_too_large, so the worker hears it."""
        report = self.success_report(task_id, attempt, fencing, output, strict=strict)
        return self._report(task_id, report, tenant)

    def fail(
        self,
        task_id: str,
        attempt: int,
        fencing: int,
        code: str,
        message: str,
        *,
        retryable: bool = True,
        unexpected: bool = False,
        tenant: str | None = None,
    ) -> str:
        report = self.failure_report(
            task_id, attempt, fencing, code, message, retryable=retryable, unexpected=unexpected
        )
        return self._report(task_id, report, tenant)

    def report_and_claim(
        self,
        reports: Sequence[ReportSuccess | ReportFailure],
        worker: str,
        activities: Sequence[str],
        *,
        limit: int,
        lease_ttl: timedelta,
        queue: str = "default",
        versions: Sequence[str] | None = None,
        scan: bool = True,
    ) -> tuple[list[str | None], list[TaskLease]]:
        """Record many results and lease up to `limit` new tasks in ONE transaction (one commit, one
        fsync): the worker's hot path. Verdicts are "accepted", "ignored", "not_found", or None for a
        report that failed inside (retry it later). Without `scan`, only the attempts these results
        schedule are leased (eager dispatch); the ready queue is not searched."""
        return dispatch.report_and_claim(
            self,
            reports,
            worker,
            activities,
            limit=limit,
            lease_ttl=lease_ttl,
            queue=queue,
            versions=versions,
            scan=scan,
        )

    # --- scheduler duties ----------------------------------------------------------------------
    def fire_due_timers(self, limit: int = 200, partitions: list[int] | None = None) -> int:
        return dispatch.fire_due_timers(self, limit, partitions)

    def expire_leases(self, limit: int = 200, partitions: list[int] | None = None) -> int:
        return dispatch.expire_leases(self, limit, partitions)

    def next_claim_turn(self) -> int:
        """A counter that rotates which tenant a claim serves first (per process)."""
        with self._turn_lock:
            self._claim_turn += 1
            return self._claim_turn

    def scheduler_partitions(self, owner: str, ttl: timedelta) -> list[int] | None:
        """This scheduler's share of the run partitions (None: all of them, on single-writer SQLite)."""
        with self.write() as tx:
            return tx.scheduler_partitions(owner, _ms(self.clock()), int(ttl.total_seconds() * 1000))

    def dead_letter_unserved(self) -> int:
        """Send tasks no worker took within their tenant's unserved_after to the dead-letter state."""
        done: int = dispatch.dead_letter_unserved(self)
        return done

    def maintain(self) -> None:
        """Slow housekeeping: create the coming months' event partitions (PostgreSQL)."""
        ensure = getattr(self.store, "ensure_partitions", None)
        if ensure is not None:
            ensure()

    def retry(
        self,
        tenant: str,
        run_id: str,
        step: str,
        reason: str,
        *,
        actor: str | None = None,
        new_key: bool = False,
    ) -> dict[str, Any]:
        """Operator: run a step waiting for attention (dead letter, unknown outcome) again."""
        if not reason.strip():
            raise InvalidInput("a reason is required (--reason TEXT)")
        state, _ = self.command(run_id, RetryStep(step, reason.strip(), actor, new_key), tenant)
        return {"run_id": run_id, "step": step, "status": state.status, "attempt": state.steps[step].attempts}

    def dead_letters(self, tenant: str, limit: int = 100) -> list[dict[str, Any]]:
        """Runs waiting in the dead-letter state, with their reasons (newest first)."""
        out = []
        for r in self.runs(tenant, status="needs_attention", before="", limit=limit):
            att = r["attention"] or {}
            if att.get("code") == "dead_letter":
                out.append(
                    {
                        "run_id": r["run_id"],
                        "step": att["step"],
                        "reason": att["reason"],
                        "since": att["since"],
                        "definition": r["definition"],
                    }
                )
        return out

    def next_wakeup(self) -> datetime | None:
        with self.read() as tx:
            ms = tx.next_wakeup_ms()
        return datetime.fromtimestamp(ms / 1000, UTC) if ms is not None else None

    # --- verification --------------------------------------------------------------------------
    def verify(self, run_id: str | None = None, tenant: str | None = None) -> list[dict[str, Any]]:
        """Replay every run's events, compare with its snapshot, check seq and the hash chain."""
        with self.read() as tx:
            ids = [run_id] if run_id else tx.run_ids(tenant)
        report = []
        for rid in ids:
            with self.read() as tx:
                loaded = tx.load_run(rid)
                rows = tx.events(rid)
            if loaded is None or (tenant is not None and loaded.state.tenant != tenant):
                raise NotFound(f"run {rid} not found")
            problems = []
            h = GENESIS
            for i, (e, stored) in enumerate(rows):
                if e.seq != i + 1:
                    problems.append(f"sequence gap: event #{i + 1} has seq {e.seq}")
                h = chain_hash(h, rid, e)
                if h != stored:
                    problems.append(f"hash chain broken at seq {e.seq} ({e.type})")
                    h = stored
            if h != loaded.last_hash:
                problems.append("the run's last hash does not match its last event")
            try:
                replayed = fold([e for e, _ in rows])
            except ValueError as exc:
                problems.append(f"replay failed: {exc}")
                replayed = None
            if replayed is not None and canonical_json(replayed.to_json()) != canonical_json(
                loaded.state.to_json()
            ):
                diff = [k for k, v in replayed.to_json().items() if loaded.state.to_json().get(k) != v]
                problems.append(f"snapshot differs from replay in: {', '.join(diff)}")
            report.append({"run_id": rid, "events": len(rows), "ok": not problems, "problems": problems})
        return report
