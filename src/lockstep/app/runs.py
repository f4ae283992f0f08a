"""Runs: start (one, or many in one transaction), cancel, retry a step that waits for attention, and the
views of a run (show, events, lists, dead letters) and their verification against the stored history."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from ..core.canonical import JSONObject, JSONValue, canonical_json, digest
from ..core.commands import CancelRun, Rejected, RetryStep, StartRun
from ..core.explain import explain
from ..core.lanes import attentions
from ..core.sealed import FORGOTTEN, SENSITIVE, map_markers, redaction
from ..core.shape import Shape, for_view
from ..core.state import RunState
from ..errors import Conflict, InvalidInput, NotFound
from ..store import ConcurrencyError, StartTx
from .audit import Audit
from .backlog import Backlog
from .kernel import epoch_ms
from .port import KernelPort
from .quotas import admit, check_input, check_value
from .taken import settled
from .tracing import SpanRef, TraceSink, new_trace
from .verify import verify_run
from .views import (
    CancelResult,
    ChildRef,
    DeadLetter,
    DefinitionRef,
    EventView,
    EventWaitRef,
    LaneView,
    ParentRef,
    RetryResult,
    RunStatus,
    RunView,
    StartResult,
    StepView,
    VerifyResult,
    WaitKind,
)
from .views.recorded import Attention, CancelInfo
from .work import Eager, Work

__all__ = ["Runs", "new_run_id"]


def new_run_id(now: datetime) -> str:
    """Time-ordered and unguessable: 48 bits of milliseconds then 80 random bits, as hex."""
    return f"{int(now.timestamp() * 1000):012x}{secrets.token_hex(10)}"


def _status(s: RunState) -> RunStatus:
    return cast(RunStatus, s.status)


def _json_digest(value: object, what: str) -> str:
    """digest(value), or InvalidInput when value is not plain JSON (NaN, infinity, lone surrogates)."""
    try:
        return digest(value)
    except (TypeError, ValueError, UnicodeEncodeError) as exc:
        raise InvalidInput(f"{what} is not valid JSON: {str(exc).splitlines()[0][:200]}") from None


class Runs:
    def __init__(self, kernel: KernelPort[StartTx], work: Work) -> None:
        self.kernel = kernel
        self.work = work  # a start next to an in-process worker leases its first attempt to it
        self.audit = Audit(kernel)  # cancel and retry are audited
        # Backpressure at the edge: starts wait while the workers' queue is full (schedules and `run`
        # steps start runs inside the engine and are bounded by their own limits instead).
        self.backlog = Backlog(kernel)
        # The process's tracing (set by the service when configured): a start records a trace then.
        self.tracing: TraceSink | None = None

    # --- commands ------------------------------------------------------------------------------
    def start(
        self,
        tenant: str,
        name: str,
        *,
        input: JSONValue = None,
        key: str | None = None,
        version: int | None = None,
        actor: str | None = None,
        parent: SpanRef | None = None,
    ) -> StartResult:
        """Start a run; with `key`, the same key returns the same run (and a different request is refused).
        `parent`: the caller's span; the run's trace is a part of the caller's trace (not part of the
        request: a retried start with another parent returns the same run)."""
        payload = {} if input is None else input
        # Measured before the transaction (which compares again with the settings it reads).
        shape = self.kernel.check_value(tenant, payload, "max_input_bytes", "the run input", "input")
        request = _json_digest({"definition": name, "version": version, "input": payload}, "the run input")
        self.backlog.admit(tenant)
        for _ in range(5):
            now = self.kernel.clock()
            try:
                eager = self.work.local_eager()
                with self.kernel.write() as tx:
                    if key is not None:
                        found = tx.run_by_key(tenant, key)
                        if found is not None:
                            if found[1] != request:
                                raise Conflict(
                                    f"start key {key!r} was already used for a different request "
                                    f"(run {found[0]}); use a new key",
                                    code="key_reused",
                                )
                            return StartResult(run_id=found[0], created=False)
                    run_id = self._start_in(
                        tx, now, tenant, name, version, payload, key, actor, request, shape, eager, parent
                    )
                if eager is not None and eager.leases and eager.owner is not None:
                    eager.owner.accept(eager.leases)  # committed: the first attempt may run now
                return StartResult(run_id=run_id, created=True)
            except ConcurrencyError:
                continue
            except Rejected as r:
                raise InvalidInput(r.reason, code=r.code) from None
        raise Conflict("could not start the run because of concurrent writers; try again")

    def start_many(
        self,
        tenant: str,
        name: str,
        inputs: Sequence[JSONValue],
        *,
        actor: str | None = None,
        parent: SpanRef | None = None,
    ) -> list[str]:
        """Start one run per input in ONE transaction (bulk loads, backfills): all start or none do.
        Each run passes the same checks and tenant limits as `start`; no start keys."""
        payloads = [{} if data is None else data for data in inputs]
        shapes = [
            self.kernel.check_value(tenant, data, "max_input_bytes", f"run input #{i}", "input")
            for i, data in enumerate(payloads)
        ]
        requests = [
            _json_digest({"definition": name, "version": None, "input": data}, "the run input")
            for data in inputs
        ]
        self.backlog.admit(tenant, len(payloads))
        now = self.kernel.clock()
        try:
            with self.kernel.write() as tx:
                return [
                    self._start_in(
                        tx, now, tenant, name, None, data, None, actor, request, shape, None, parent
                    )
                    for data, request, shape in zip(payloads, requests, shapes, strict=True)
                ]
        except Rejected as r:
            raise InvalidInput(r.reason, code=r.code) from None

    def start_in(
        self,
        tx: StartTx,
        now: datetime,
        tenant: str,
        name: str,
        *,
        input: JSONValue,
        key: str | None,
        version: int | None,
        actor: str | None,
    ) -> str:
        """Start a run inside the caller's transaction, with the same checks and limits as `start` (a
        schedule's slot: the start and the schedule's advance commit together). Raises what `start`
        does, and the core's Rejected."""
        payload = {} if input is None else input
        settings = self.kernel.settings_of(tenant, tx)  # read in `tx`: no second transaction opens
        shape = check_value(settings, tenant, payload, "max_input_bytes", "the run input", "input")
        request = _json_digest({"definition": name, "version": version, "input": payload}, "the run input")
        return self._start_in(tx, now, tenant, name, version, payload, key, actor, request, shape)

    def _start_in(
        self,
        tx: StartTx,
        now: datetime,
        tenant: str,
        name: str,
        version: int | None,
        payload: JSONValue,
        key: str | None,
        actor: str | None,
        request: str,
        shape: Shape,
        eager: Eager | None = None,
        parent: SpanRef | None = None,
        run_id: str | None = None,
        parent_run: JSONObject | None = None,
    ) -> str:
        """`run_id` and `parent_run` ({run_id, step, depth}): a child run's, which its parent chose."""
        tenant_row = tx.tenant(tenant)  # read fresh, once: it bounds the input and admits the start
        settings = check_input(tenant_row, tenant, shape)
        row = tx.definition(tenant, name, version)
        if row is None:
            known = [x["name"] for x in tx.definitions(tenant)]
            what = f"{name} version {version}" if version else name
            hint = f" (published: {', '.join(sorted(set(known)))})" if known else " (none published)"
            raise NotFound(
                f"no definition {what} in tenant {tenant}{hint}; "
                "publish it first with `lockstep publish FILE`"
            )
        d = self.kernel.definition_for(tx, tenant, name, row.version)
        admit(tx, tenant_row, tenant, epoch_ms(now))
        run_id = run_id or new_run_id(now)
        max_run = settings.get("max_run_seconds")
        trace, trace_parent = self._trace(parent)
        cmd = StartRun(
            run_id,
            tenant,
            row.version,
            payload,
            key,
            actor,
            int(float(max_run) * 1000) if max_run else None,
            trace=trace,
            trace_parent=trace_parent,
            parent=parent_run,
        )
        if eager is None:
            self.kernel.apply(tx, None, cmd, now, d, request_digest=request)
            return run_id
        after, events = self.kernel.apply(
            tx,
            None,
            cmd,
            now,
            d,
            request_digest=request,
            then=lambda st, evs: eager.follow(self.kernel, tx, now, st, evs),
            lease_until=now + eager.lease_ttl,
        )
        if after is not None:
            eager.leased(tx, now, after, events)
        return run_id

    def start_child(
        self,
        tx: StartTx,
        now: datetime,
        tenant: str,
        name: str,
        version: int | None,
        payload: JSONValue,
        key: str,
        run_id: str,
        parent_run: JSONObject,
        parent_span: SpanRef | None,
    ) -> str:
        """Start a child run inside the caller's transaction (the children pass): the parent's tenant,
        a definition of that tenant only, the same checks and limits as any start."""
        shape = self.kernel.check_value(tenant, payload, "max_input_bytes", "the child run's input", "input")
        request = _json_digest({"definition": name, "version": version, "input": payload}, "the input")
        return self._start_in(
            tx,
            now,
            tenant,
            name,
            version,
            payload,
            key,
            None,
            request,
            shape,
            None,
            parent_span,
            run_id=run_id,
            parent_run=parent_run,
        )

    def _trace(self, parent: SpanRef | None) -> tuple[str | None, str | None]:
        """The trace context a start records: none when this process does not trace and the caller
        named no parent (its trace id is then derived from the run's id, when someone traces it)."""
        if self.tracing is not None:
            return self.tracing.new_trace(parent)
        if parent is not None:
            return new_trace(parent)
        return None, None

    def cancel(self, tenant: str, run_id: str, reason: str, actor: str | None = None) -> CancelResult:
        if not reason or not reason.strip():
            raise InvalidInput("a reason is required to cancel a run (--reason TEXT)")
        cmd = CancelRun(reason.strip(), actor)
        state, events = self.audit.command(tenant, actor, "run.cancel", run_id, cmd, reason=cmd.reason)
        return CancelResult(run_id=run_id, status=_status(state), accepted=bool(events))

    def retry(
        self,
        tenant: str,
        run_id: str,
        step: str,
        reason: str,
        *,
        actor: str | None = None,
        new_key: bool = False,
    ) -> RetryResult:
        """Operator: run a step waiting for attention (dead letter, unknown outcome) again."""
        if not reason.strip():
            raise InvalidInput("a reason is required (--reason TEXT)")
        cmd = RetryStep(step, reason.strip(), actor, new_key)
        state, _ = self.audit.command(
            tenant, actor, "run.retry", run_id, cmd, step=step, new_key=new_key, reason=cmd.reason
        )
        attempt = state.steps[step].attempts
        return RetryResult(run_id=run_id, step=step, status=_status(state), attempt=attempt)

    # --- views ---------------------------------------------------------------------------------
    def show(self, tenant: str | None, run_id: str) -> RunView:
        """The run's view; one the scrub marked damaged is shown as stored, saying it is refused."""
        s, damaged = self.kernel.inspect(tenant, run_id)
        view = self.describe(s)
        if damaged is None:
            return view
        # Never an ordinary wait: nothing will happen to it, whatever its snapshot says it waits for.
        return view.model_copy(
            update={
                "damaged": damaged.problem,
                "wait_kind": None,
                "wait_reason": f"refused: {damaged}; every command on it is refused (corrupt_run)",
                "waiting_until": None,
                "next_action": f"nothing, until its rows are restored from a backup (`lockstep verify "
                f"{s.run_id}` shows what is wrong)",
            }
        )

    def redaction_of(self, run_id: str) -> Any:
        """A function making the redaction marker of `run_id`'s sealed values: "forgotten" once the run's
        key was destroyed, else "sensitive" (the key row is read once, on the first marker met)."""
        kind: list[str] = []

        def shown(_marker: Any) -> Any:
            if not kind:
                with self.kernel.read() as tx:
                    row = tx.run_key(run_id)
                kind.append(FORGOTTEN if row is not None and row.wrapped is None else SENSITIVE)
            return redaction(kind[0])

        return shown

    def redacted(self, s: RunState) -> RunState:
        """`s` with each sealed value replaced by its redaction marker (`s` itself if it holds none)."""
        raw = s.to_json(copy_values=False)
        shown = map_markers(raw, self.redaction_of(s.run_id))
        return s if shown is raw else RunState.from_json(shown)

    def describe(self, s: RunState) -> RunView:
        """The view of a run: every sealed value in it redacted (reveal.py opens them first)."""
        s = self.redacted(s)
        now = self.kernel.clock()
        why = explain(s, now)
        d = self.kernel.definition(s.tenant, s.definition["name"], s.definition["version"])
        steps = {}
        over = settled(d, s)
        for sid, st in sorted(s.steps.items(), key=lambda kv: self._step_rank(s, kv[0])):
            steps[sid] = StepView(
                # A step a finished run never entered was not taken (a choice went elsewhere, the run
                # failed or was cancelled first); while the run goes on it is still to come: pending.
                # (app/taken.py; a succeed step the run ended at has no event of its own.)
                status=over.get(sid, st.status),
                attempts=st.attempts,
                output=for_view(st.output),
                error=for_view(st.error),
                # What an operator looks the effect up with downstream (unknown outcomes, repairs).
                idempotency_key=st.idempotency_key,
                started_at=st.started_at,
                finished_at=st.finished_at,
                kind=d.step(sid).kind if sid in d.index else None,
                duration_seconds=StepView.duration_of(st, now),
                compensation=for_view(st.compensation),
            )
        lanes = {lid: LaneView.of(lid, ln) for lid, ln in sorted(s.lanes.items())}
        waiting = attentions(s)
        return RunView(
            run_id=s.run_id,
            tenant=s.tenant,
            status=_status(s),
            definition=DefinitionRef.model_validate(s.definition),
            current_step=s.current_step,
            wait_kind=cast(WaitKind | None, why["wait_kind"]),
            wait_reason=why["wait_reason"],
            waiting_since=why["waiting_since"],
            waiting_until=why["waiting_until"],
            next_action=why["next_action"],
            # Every value as the views show it: what no limit could accept is a marker, never a 500.
            input=for_view(s.input),
            output=for_view(s.output),
            error=for_view(s.error),
            steps=steps,
            lanes=lanes,
            parent=ParentRef.model_validate(s.parent) if s.parent else None,
            children={
                k: ChildRef(
                    child_run_id=c["child_run_id"],
                    definition=c["definition"],
                    version=c["version"],
                    requested_at=c["at"],
                    cancel=c.get("cancel"),
                )
                for k, c in sorted(s.children.items())
            },
            event_waits={
                k: EventWaitRef(
                    name=w["name"],
                    key=w["key"],
                    since=w["at"],
                    expires_at=w["expires_at"],
                    callback=bool(w.get("callback")),
                    integration=w.get("integration"),
                )
                for k, w in sorted(s.event_waits.items())
            },
            started_at=s.started_at,
            updated_at=s.updated_at,
            finished_at=s.finished_at,
            cancel=cast(CancelInfo | None, s.cancel),
            attention=cast(Attention | None, waiting[0] if waiting else None),
            seq=s.seq,
            start_key=s.start_key,
            ignored_results=s.ignored_results,
        )

    def _step_rank(self, s: RunState, key: str) -> tuple[int, int, str]:
        """Steps are shown in definition order (snapshots store them keyed, hence unordered); those in a
        parallel or for-each step right after it, by key."""
        d = self.kernel.definition(s.tenant, s.definition["name"], s.definition["version"])
        top = key.split(".", 1)[0].split("[", 1)[0]
        return d.index.get(top, len(d.index)), int(top != key), key

    def events(self, tenant: str | None, run_id: str, opener: Any = None) -> list[EventView]:
        """The run's history as stored, sealed values redacted; `opener` (reveal.py's) opens them. A run
        the scrub marked damaged shows its history too: it is the evidence (rows that no longer decode
        are refused as before)."""
        self.kernel.inspect(tenant, run_id)
        with self.kernel.read() as tx:
            rows = tx.events(run_id)
        shown = self.redaction_of(run_id)
        out = []
        for e, _h in rows:
            item: dict[str, JSONValue] = {"seq": e.seq, "type": e.type, "at": e.at}
            data = e.data_json()
            if "step" in data:
                item["step"] = data["step"]
            if "attempt" in data:
                item["attempt"] = data["attempt"]
            item["data"] = for_view(map_markers(opener(data) if opener else data, shown))
            out.append(EventView(**item))  # step and attempt stay unset when the event has none
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
    ) -> list[RunView]:
        """Runs of a tenant: ascending after `after`, or newest first below `before` ("" = from the top).

        `wait_kind` filters on why a run waits (queued, running, timer, retry, attention, ...)."""
        out: list[RunView] = []
        cursor_after, cursor_before = after, before
        while len(out) < limit:
            with self.kernel.read() as tx:
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
                if wait_kind is None or shown.wait_kind == wait_kind:
                    out.append(shown)
            if len(page) < limit or wait_kind is None:
                break
            if cursor_before is not None:
                cursor_before = page[-1].run_id
            else:
                cursor_after = page[-1].run_id
        return out[:limit]

    def dead_letters(self, tenant: str, limit: int = 100) -> list[DeadLetter]:
        """Runs waiting in the dead-letter state, with their reasons (newest first)."""
        out = []
        for r in self.runs(tenant, status="needs_attention", before="", limit=limit):
            att = r.attention
            if att is not None and att["code"] == "dead_letter":
                out.append(
                    DeadLetter(
                        run_id=r.run_id,
                        step=att["step"],
                        # A sealed reason is shown as its redaction marker's text.
                        reason=att["reason"]
                        if isinstance(att["reason"], str)
                        else canonical_json(att["reason"]),
                        since=att["since"],
                        definition=r.definition,
                    )
                )
        return out

    def verify(self, run_id: str | None = None, tenant: str | None = None) -> list[VerifyResult]:
        """Replay every run's events, compare with its snapshot, check seq and the hash chain."""
        with self.kernel.read() as tx:
            ids = [run_id] if run_id else tx.run_ids(tenant)
        return [verify_run(self.kernel, rid, tenant) for rid in ids]
