"""The application layer composed once over one store: the kernel, the feature services built on it,
and the calls the entry points (CLI, Python API, HTTP API, UI, workers, scheduler) make.

Each call is the feature service's own bound method, so its signature and docstring live in one place:

    kernel.py       transactions, clock, apply/command, definitions, tenant settings, listeners
    definitions.py  publish, look up                 runs.py     start, cancel, retry, show, list, verify
    search.py       the runs search (UI, API, CLI): filters checked with a message, pages newest first
    work.py         claims, eager dispatch, leases   reports.py  workers' results (+ the next leases)
    sweeps.py       timers, lease expiry, dead letters, scheduler partitions
    children.py     the outbox between a `run` step and its child run (the scheduler's pass)
    events/         external events (delivery, buffering) and per-wait signed callbacks
    principals/     tenants, users, keys, sessions   approvals/  links, decisions, inboxes
    repair.py       operator repair, migrations      quotas.py   tenant limits (values, starts)
    migrations/     migrations that need approval: requests, decisions, the apply pass
    retention.py    legal holds, status, tombstones  purge.py    the purge pass (scheduler)
    scrub.py        the background scrub: verify a batch of runs per pass, mark the damaged (scheduler)
    keys/           encryption keys: seal/open, rotation, re-wrap, forget, shred
    reveal.py       sensitive values shown to a user with the read_sensitive grant (audited)
    tracing/        OpenTelemetry spans from committed events; the trace a start records
    observability/  this process's Prometheus metrics (and the database's gauges), JSON logs
    audit.py        the audit log: record, read, export, verify its hash chains
    schedules/      cron schedules: create, pause, trigger...; the scheduler's pass fires their slots
    secrets.py      secrets by reference and egress policies (the http step's)
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from ..core.definition import Limits
from ..core.limits import DEFAULT_SERVER_LIMITS, ServerLimits
from ..store import Store
from .approvals import Approvals
from .approvers import approval_notes
from .audit import Audit
from .children import Children
from .definitions import Definitions
from .events import Callbacks, EventDeliveries
from .kernel import Kernel, utcnow
from .keys import KeyProvider, KeyRing, Keys
from .migrations import Migrations
from .observability import Metrics
from .principals import Principals
from .repair import Repairs
from .reports import Reports, failure_report, success_report
from .retention import Retention
from .reveal import Reveal
from .runrefs import RunRefs
from .runs import Runs, new_run_id
from .schedules import Firing, Schedules
from .scrub import Scrub
from .search import RunSearch
from .secrets import Egress, Secrets
from .sweeps import Sweeps
from .tracing import TraceSink
from .webhooks import Webhooks
from .work import TaskLease, Work

__all__ = ["Service", "TaskLease", "new_run_id", "utcnow"]


class Service:
    """One per process (Engine.open builds it): the parts are built once here and shared by every
    request, command and page of the process."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], datetime] = utcnow,
        limits: Limits | None = None,
        server_limits: ServerLimits = DEFAULT_SERVER_LIMITS,
        unserved_after: timedelta = timedelta(hours=1),
        keys: KeyProvider | None = None,
        tracing: TraceSink | None = None,
    ) -> None:
        # One key ring per process: the kernel seals with it, the store opens with it.
        ring = KeyRing(keys, clock)
        store.sealer = ring
        kernel = self.kernel = Kernel(store, clock=clock, server_limits=server_limits)
        kernel.sealer = ring
        kernel.approvers = approval_notes
        definitions = Definitions(kernel, limits)
        work = Work(kernel)
        reports = Reports(kernel, work)
        sweeps = Sweeps(kernel, unserved_after)
        runs = Runs(kernel, work)
        children = Children(kernel, runs)
        # Tracing (app/tracing), when configured: spans from every committed transition, a trace per start.
        self.tracing = tracing
        if tracing is not None:
            kernel.observers.append(tracing.observe)
            runs.tracing = tracing
        # This process's metrics (app/observability): counts what it commits; served by /metrics
        # (serve) or `--metrics-port` (worker, scheduler).
        self.metrics = Metrics(kernel)
        # Built here once, shared by every request, command and page of this process.
        self.principals = Principals(kernel)
        # Migrations that need approval (app/migrations/): asked by migrate, decided from the inbox.
        self.migrations = Migrations(kernel)
        self.approvals = Approvals(kernel, runs, self.principals, migrations=self.migrations)
        self.repairs = Repairs(kernel, runs)
        self.repairs.approvals = self.migrations
        self.retention = Retention(kernel)
        self.keys = Keys(kernel, ring)
        self.reveal = Reveal(kernel, runs, self.principals, self.approvals)
        self.audit = Audit(kernel)
        self.schedules = Schedules(kernel, runs, ring)
        # External events (app/events): POST /v1/events, the buffered events' pass, callbacks.
        self.event_deliveries = EventDeliveries(kernel)
        self.callbacks = Callbacks(kernel, ring, "http://127.0.0.1:8080")
        self.secrets = Secrets(kernel, ring)
        self.egress = Egress(kernel)
        # Run webhooks (app/webhooks.py), under the tenant's egress policy; delivered by runtime/.
        self.webhooks = Webhooks(kernel, ring, self.egress.policy)

        # The kernel: what runtime/ and the tests reach below the feature calls.
        self.store = kernel.store
        self.clock = kernel.clock
        self.server_limits = kernel.server_limits
        self.listeners = kernel.listeners
        self.observers = kernel.observers
        self.write = kernel.write
        self.read = kernel.read
        self.apply = kernel.apply
        self.command = kernel.command
        self.state = kernel.state
        self.definition_for = kernel.definition_for
        self.settings_of = kernel.settings_of
        self.check_value = kernel.check_value

        # Definitions.
        self.limits = definitions.limits
        self.publish = definitions.publish
        self.definition_document = definitions.definition_document
        self.definitions = definitions.definitions

        # Runs.
        self.start = runs.start
        self.start_many = runs.start_many
        self.cancel = runs.cancel
        self.retry = runs.retry
        self.show = runs.show
        self.describe = runs.describe
        self.events = runs.events
        self.runs = runs.runs
        self.find_runs = RunSearch(kernel, runs).find  # the runs search (app/search.py)
        self.find_run = RunRefs(kernel).resolve
        self.dead_letters = runs.dead_letters
        self.verify = runs.verify
        self.verify_audit = self.audit.verify

        # Workers: leases and results.
        self.local_workers = work.local_workers
        self.claim = work.claim
        self.abandon_leases = work.abandon_leases
        self.heartbeat = work.heartbeat
        self.task = work.task
        self.unrecorded_results = reports.unrecorded_results
        self.complete = reports.complete
        self.fail = reports.fail
        self.report_and_claim = reports.report_and_claim
        self.bounded_report = reports.bounded_report
        self.success_report = success_report
        self.failure_report = failure_report

        # The scheduler's duties.
        self.unserved_after = sweeps.unserved_after
        self.fire_due_timers = sweeps.fire_due_timers
        self.expire_leases = sweeps.expire_leases
        self.dead_letter_unserved = sweeps.dead_letter_unserved
        self.scheduler_partitions = sweeps.scheduler_partitions
        self.next_wakeup = sweeps.next_wakeup
        self.maintain = sweeps.maintain
        self.rewrap_keys = self.keys.rewrap
        self.fire_due_schedules = Firing(kernel, runs, self.schedules.seal).fire_due
        self.run_children = children.run_children
        self.deliver_buffered_events = self.event_deliveries.deliver_buffered

        # The built-in http executor's ports (runtime/httpstep.py): a database worker's only way to a
        # secret's clear value and to its tenant's egress policy.
        self.egress_policy = self.egress.policy
        self.egress_refused = self.egress.refused
        self.open_secret = self.secrets.use
        self.run_migrations = self.migrations.run_pass  # expire pending, apply granted migration requests
        # The background scrub (app/scrub.py): the scheduler's pass, every `scrub_interval`.
        self.scrub = Scrub(kernel, found=lambda tenant: self.metrics.damaged_runs(tenant).inc())
