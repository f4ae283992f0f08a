"""The checker: after a scenario, read the event log, the snapshots and the downstream ledger, and count
what happened (outcomes) and what must never happen (violations), Jepsen-style.

It trusts nothing the engine says about itself beyond its recorded facts: it rebuilds each run from
its events, recomputes the hash chain (through `verify`, which reads raw rows), and cross-checks every
recorded success against the effect the downstream service applied. A `Monitor` thread samples the
runs table while the faults happen, so a state that went back and came forward again is still seen.

Violations (each must be 0):
- stuck: a run neither finished nor in an explicit human state once the scenario settled;
- state_went_back: a run's seq decreased, or a finished run changed, between two samples;
- seq_gaps, hash_chain_breaks, snapshot_mismatch: the log is not contiguous, chained, or folds to a
  different state than the stored snapshot;
- duplicate_transitions: an attempt with two outcomes, a step that succeeded twice without an operator
  retry, a timer generation that fired twice;
- effects_duplicated: the downstream applied more than one effect for one (run, step, kind): a retry
  that did not reuse its idempotency key;
- effects_lost: a step recorded as succeeded whose reported result is not its own effect downstream;
- stale_results_accepted: a success recorded for attempt N with a result attempt M produced (the
  suite's activities put their attempt number in their result): a late report that fencing must stop;
- tokens_consumed_twice: an approval link used for two decisions, or an approver counted twice;
- events_consumed_twice (see eventcheck.py): one event id received twice by a run, a wait that got two
  events, a callback used twice;
- joins_repeated: a parallel or for-each step whose visit decided its join twice, ended twice, ended
  before its join was decided, or started or finished one of its lanes twice;
- wrong_version: a task run by a worker that did not declare the run's definition version;
- limit_exceeded: more active runs or concurrent attempts than the tenant's limits, in any sample;
- starts_duplicated: one start key that created two runs;
- process_died, server_errors, isolation_breached (flagged by the scenarios that attack the server, not
  derived from the log): a lockstep process died; a request was answered 5xx or dropped; a tenant under
  attack by another saw failed starts or its start latency p99 more than double;
- runs_lost, purged_unfinished, purged_held, purged_early, kept_past_retention, purge_incomplete,
  tombstone_mismatch, sealed_left, transactions_failed (retention, scenario `purge_under_load`: see
  purgecheck.py).
- keys_lost (flagged by rotate_under_load and purge_under_load, see sealing.py): a sealed value that no
  longer opens to its own value, an activity given something else than the clear value, or a rotation
  that never completed.
- spans_wrong, spans_lost (flagged by traced_crashes: see tracecheck.py): a span received that the run's
  history does not imply; a span missing that no SIGKILL explains, or still missing after
  `lockstep trace --export`.
- metrics_mismatch (flagged by lease_expiry and crash_after_commit, see metricscheck.py): the counters
  summed over every process's /metrics differ from the histories (or exceed them, with processes
  killed).
- slots_duplicated, slots_early, slots_missed, slots_unknown (schedules, scenario
  `schedules_under_faults`: see schedcheck.py).
- webhooks_lost, webhooks_out_of_order, webhooks_forged (run webhooks, scenario `webhook_receiver_down`:
  see hookcheck.py).
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from lockstep.core.definition import HTTP_ACTIVITY
from lockstep.core.events import (
    AUDIT_ONLY,
    ActivityCancelled,
    ActivityFailed,
    ActivityScheduled,
    ActivityStarted,
    ActivitySucceeded,
    ActivityTimedOut,
    ApprovalDecisionRecorded,
    CompensationScheduled,
    Event,
    ForEachStarted,
    JoinDecided,
    LaneFinished,
    LaneStarted,
    ParallelStarted,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
    StepFailed,
    StepJoined,
    StepRetried,
    TimerFired,
    WorkflowMigrated,
)
from lockstep.core.evolve import fold
from lockstep.core.state import TERMINAL, RunState
from lockstep.engine import Engine

from .clockcheck import CLOCK_CHECKS
from .eventcheck import check_events
from .ledger import LedgerReader
from .scenarios_corrupt_checks import CORRUPTION_CHECKS

__all__ = ["CHECKS", "PURGE_CHECKS", "SCHEDULE_CHECKS", "Expect", "Monitor", "Verdict", "check"]

# Retention's checks (purgecheck.py flags them after `purge_under_load`).
PURGE_CHECKS = (
    "runs_lost",
    "purged_unfinished",
    "purged_held",
    "purged_early",
    "kept_past_retention",
    "purge_incomplete",
    "tombstone_mismatch",
    "sealed_left",
    "transactions_failed",
)

# Schedules' checks (schedcheck.py flags them after `schedules_under_faults`).
SCHEDULE_CHECKS = ("slots_duplicated", "slots_early", "slots_missed", "slots_unknown")

# Run webhooks' checks (hookcheck.py flags them after `webhook_receiver_down`).
WEBHOOK_CHECKS = ("webhooks_lost", "webhooks_out_of_order", "webhooks_forged")

CHECKS = (
    "stuck",
    "state_went_back",
    "seq_gaps",
    "hash_chain_breaks",
    "snapshot_mismatch",
    "duplicate_transitions",
    "effects_duplicated",
    "effects_lost",
    "stale_results_accepted",
    "tokens_consumed_twice",
    "events_consumed_twice",
    "joins_repeated",
    "wrong_version",
    "limit_exceeded",
    "starts_duplicated",
    "process_died",
    "server_errors",
    "isolation_breached",
    *PURGE_CHECKS,
    "keys_lost",
    "spans_wrong",
    "spans_lost",
    "metrics_mismatch",
    *SCHEDULE_CHECKS,
    *WEBHOOK_CHECKS,
    *CLOCK_CHECKS,
    *CORRUPTION_CHECKS,
)
HUMAN_WAITS = {"attention", "paused", "approval"}
# http steps (lockstep.http) that call the downstream are checked like these activities.
EFFECT_ACTIVITIES = {"pay.charge": "charge", "pay.ship": "ship", "pay.pack": "pack", "pay.refund": "refund"}


@dataclass
class Expect:
    """What the scenario allows: worker versions, tenant limits, start keys to count."""

    worker_versions: dict[str, set[int]] | None = None  # worker id -> versions it runs (None: any)
    max_active_runs: int | None = None
    max_concurrency: int | None = None
    tenant: str = "default"


class Monitor:
    """Samples (run_id, seq, status) and the tenant's active runs / leased tasks every `interval`, from
    its own connection; counts regressions as they happen. Survives a database outage (skips samples)."""

    def __init__(self, engine: Engine, tenant: str = "default", interval: float = 0.1) -> None:
        self.engine = engine
        self.tenant = tenant
        self.interval = interval
        self.seen: dict[str, tuple[int, str]] = {}
        self.regressions: list[str] = []
        self.max_active = 0
        self.max_leased = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="faults-monitor", daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.sample()  # one last look after everything settled

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        try:
            with self.engine.service.read() as tx:
                rows = tx.runs(self.tenant, status=None, definition=None, after="", limit=100_000)
                active = tx.active_runs(self.tenant)
                leased = tx.leased_count(self.tenant)
        except Exception:
            return
        self.samples += 1
        self.max_active = max(self.max_active, active)
        self.max_leased = max(self.max_leased, leased)
        for row in rows:
            rid, seq, status = row.run_id, row.seq, row.status
            before = self.seen.get(rid)
            if before is not None:
                if seq < before[0]:
                    self.regressions.append(f"{rid}: seq went from {before[0]} back to {seq}")
                elif before[1] in TERMINAL and status != before[1]:
                    # Audit-only events (a late result) may follow the end; a new status may not.
                    self.regressions.append(f"{rid}: finished as {before[1]}, later {status} at seq {seq}")
            self.seen[rid] = (max(seq, before[0]) if before else seq, status)


@dataclass
class Verdict:
    outcomes: dict[str, int] = field(default_factory=dict)
    violations: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CHECKS, 0))
    examples: dict[str, list[str]] = field(default_factory=dict)

    def flag(self, check: str, example: str) -> None:
        self.violations[check] += 1
        shown = self.examples.setdefault(check, [])
        if len(shown) < 5:
            shown.append(example)

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())


def check(
    engine: Engine,
    ledger: LedgerReader,
    expect: Expect,
    monitor: Monitor | None = None,
    refs: bool = False,
) -> Verdict:
    """Everything the checker knows how to check, over every run of `expect.tenant`."""
    v = Verdict()
    svc = engine.service
    outcomes: Counter[str] = Counter()
    with svc.read() as tx:
        run_ids = tx.run_ids(expect.tenant)
    states: dict[str, RunState] = {}
    for report in svc.verify(tenant=expect.tenant):
        rid = report.run_id
        for problem in report.problems:
            kind = (
                "seq_gaps"
                if problem.startswith("sequence gap")
                else "hash_chain_breaks"
                if "hash" in problem
                else "snapshot_mismatch"
            )
            v.flag(kind, f"{rid}: {problem}")
    effects = ledger.effects()
    by_id = {str(e["response"].get("id")): e for e in effects}  # what a success's output points at
    per_step = Counter((e["run_id"], e["step"], e["kind"]) for e in effects)
    for (rid, step, kind), n in per_step.items():
        if n > 1:
            v.flag("effects_duplicated", f"{rid}/{step}: {n} {kind} effects downstream")
    for rid in run_ids:
        with svc.read() as tx:
            events = [e for e, _ in tx.events(rid)]
        s = fold(events)
        if s is None:
            v.flag("seq_gaps", f"{rid}: a run row without any event")
            continue
        states[rid] = s
        outcomes["started"] += 1
        _classify(s, outcomes, v)
        _transitions(rid, events, v)
        _effects(rid, events, by_id, v)
        if expect.worker_versions is not None:
            _versions(rid, events, expect.worker_versions, v)
    if monitor is not None:
        for regression in monitor.regressions:
            v.flag("state_went_back", regression)
        if expect.max_active_runs is not None and monitor.max_active > expect.max_active_runs:
            v.flag("limit_exceeded", f"{monitor.max_active} active runs > {expect.max_active_runs}")
        if expect.max_concurrency is not None and monitor.max_leased > expect.max_concurrency:
            v.flag("limit_exceeded", f"{monitor.max_leased} attempts at once > {expect.max_concurrency}")
    if refs:
        _starts(states, v)
    v.outcomes = dict(outcomes)
    return v


def _classify(s: RunState, outcomes: Counter[str], v: Verdict) -> None:
    from lockstep.core.explain import wait_kind  # noqa: PLC0415 - one helper, kept next to its use

    if s.status in TERMINAL:
        outcomes[s.status] += 1
        return
    kind = wait_kind(s)
    if kind in HUMAN_WAITS:
        outcomes["human"] += 1
        return
    outcomes["stuck"] += 1
    v.flag("stuck", f"{s.run_id}: {s.status} ({kind}) at seq {s.seq}")


def _transitions(rid: str, events: list[Event], v: Verdict) -> None:
    outcomes: Counter[tuple[str, int]] = Counter()
    successes: Counter[tuple[str, bool]] = Counter()
    retried: Counter[str] = Counter()
    fired: Counter[tuple[str, int]] = Counter()
    ended: Event | None = None
    for e in events:
        d = e.data
        if ended is not None and e.type not in AUDIT_ONLY:
            v.flag("state_went_back", f"{rid}: {e.type} at seq {e.seq} after {ended.type} at seq {ended.seq}")
        if isinstance(d, RunCompleted | RunFailed | RunCancelled):
            ended = e
        if isinstance(d, ActivitySucceeded | ActivityFailed | ActivityTimedOut | ActivityCancelled):
            outcomes[(d.task_id, int(d.attempt))] += 1
        if isinstance(d, ActivitySucceeded):
            key = (d.step, bool(d.compensation))
            successes[key] += 1
            if successes[key] > 1 + retried[d.step]:
                v.flag("duplicate_transitions", f"{rid}: step {d.step} succeeded again at seq {e.seq}")
        elif isinstance(d, StepRetried):
            retried[d.step] += 1
        elif isinstance(d, TimerFired):
            fired[(d.key, int(d.generation))] += 1
    for (task, attempt), n in outcomes.items():
        if n > 1:
            v.flag("duplicate_transitions", f"{rid}: {task} attempt {attempt} has {n} outcomes")
    for (timer, gen), n in fired.items():
        if n > 1:
            v.flag("duplicate_transitions", f"{rid}: timer {timer} generation {gen} fired {n} times")
    _approvals(rid, events, v)
    _joins(rid, events, v)
    check_events(rid, events, v)


def _joins(rid: str, events: list[Event], v: Verdict) -> None:
    """Per visit of a shape step: one JoinDecided, then one end (StepJoined, or StepFailed of the step),
    each lane started and finished at most once."""
    visits: dict[str, Counter[str]] = {}
    for e in events:
        d = e.data
        if isinstance(d, ParallelStarted | ForEachStarted):
            visits[d.step] = Counter()
            continue
        step = getattr(d, "step", None)
        if step not in visits:
            continue
        seen = visits[str(step)]
        if isinstance(d, JoinDecided):
            seen["join"] += 1
            if seen["join"] > 1:
                v.flag("joins_repeated", f"{rid}: step {step} decided its join again at seq {e.seq}")
        elif isinstance(d, StepJoined | StepFailed):
            seen["end"] += 1
            if seen["end"] > 1 or (isinstance(d, StepJoined) and seen["join"] != 1):
                v.flag("joins_repeated", f"{rid}: step {step} ended again (or undecided) at seq {e.seq}")
        elif isinstance(d, LaneStarted | LaneFinished):
            what = f"{type(d).__name__} {d.lane}"
            seen[what] += 1
            if seen[what] > 1:
                v.flag("joins_repeated", f"{rid}: {what} twice in one visit of {step} (seq {e.seq})")


def _approvals(rid: str, events: list[Event], v: Verdict) -> None:
    links: Counter[str] = Counter()
    approvers: Counter[tuple[str, str]] = Counter()
    for e in events:
        if isinstance(d := e.data, ApprovalDecisionRecorded):
            if d.link_id:
                links[d.link_id] += 1
            approvers[(d.request_id, d.approver)] += 1
    for link, n in links.items():
        if n > 1:
            v.flag("tokens_consumed_twice", f"{rid}: link {link} decided {n} times")
    for (req, who), n in approvers.items():
        if n > 1:
            v.flag("tokens_consumed_twice", f"{rid}: {who} counted {n} times on request {req}")


def _effects(rid: str, events: list[Event], by_id: dict[str, dict[str, Any]], v: Verdict) -> None:
    """Each success of an effect activity must report the effect applied for that very step."""
    activity: dict[str, str] = {}
    for e in events:
        d = e.data
        if isinstance(d, ActivityScheduled | CompensationScheduled):
            activity[d.task_id] = d.activity
        if not isinstance(d, ActivitySucceeded):
            continue
        kind = activity.get(d.task_id)
        if kind not in EFFECT_ACTIVITIES and kind != HTTP_ACTIVITY:
            continue
        out = d.output or {}
        if kind == HTTP_ACTIVITY:  # an http step (http_lost_response): the downstream's answer is its body
            out = out.get("body") if isinstance(out, dict) and isinstance(out.get("body"), dict) else {}
        if "attempt" in out and int(out["attempt"]) != int(d.attempt):
            v.flag(
                "stale_results_accepted",
                f"{rid}/{d.step}: attempt {d.attempt} got attempt {out['attempt']}'s result",
            )
        applied = by_id.get(str(out.get("id")))
        if applied is None or applied["run_id"] != rid or applied["step"] != d.step:
            where = f"{applied['run_id']}/{applied['step']}" if applied else "nowhere"
            v.flag("effects_lost", f"{rid}/{d.step} succeeded with the effect of {where}")


def _versions(rid: str, events: list[Event], allowed: dict[str, set[int]], v: Verdict) -> None:
    version = 0
    for e in events:
        d = e.data
        if isinstance(d, RunStarted | WorkflowMigrated):
            version = int(d.definition["version"])
        elif isinstance(d, ActivityStarted):
            worker = str(d.worker)
            if worker in allowed and version not in allowed[worker]:
                v.flag("wrong_version", f"{rid}: {worker} ran a v{version} task at seq {e.seq}")


def _starts(states: dict[str, RunState], v: Verdict) -> None:
    """Clients put a unique `ref` in each run's input and retry a start with the same key: one run each."""
    per_ref: defaultdict[str, list[str]] = defaultdict(list)
    for rid, s in states.items():
        if isinstance(s.input, dict) and s.input.get("ref"):
            per_ref[str(s.input["ref"])].append(rid)
    for ref, rids in per_ref.items():
        if len(rids) > 1:
            v.flag("starts_duplicated", f"start {ref}: {len(rids)} runs ({', '.join(rids[:3])})")
