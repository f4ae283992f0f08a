"""What every scenario shares: its context (fleet, seeded randomness, size), the test definitions, and
the driver's moves that are not faults themselves (start runs, wait until everything settled, keep a
set of workers alive while faults kill them).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from lockstep.core.explain import wait_kind
from lockstep.core.state import TERMINAL

from ..fleet import Proc
from .checker import HUMAN_WAITS, Expect, Monitor, Verdict, check
from .faultfleet import FaultFleet

__all__ = [
    "RETRY",
    "Ctx",
    "Outcome",
    "Scenario",
    "Supervisor",
    "every",
    "pay_definition",
    "requeue_done_tasks",
    "settle_time",
    "start_runs",
    "unsettled",
]

_COUNT_LOCK = threading.Lock()
RETRY = {"max_attempts": 20, "initial_interval": "100ms", "backoff": 1.5, "max_interval": "1s"}


def pay_definition(
    name: str = "pay",
    *,
    wait: str = "300ms",
    extra: list[dict[str, Any]] | None = None,
    parallel: bool = False,
) -> dict[str, Any]:
    """Charge (with a refund as compensation), a durable timer, then ship: two effects and a timer.
    `parallel`: the timer and ship run in one branch of a parallel step while another branch packs
    (a third effect), so two attempts of a run are in flight at once and the step joins once."""
    charge = {
        "id": "charge",
        "activity": "pay.charge",
        "input": {"amount": "${input.amount}"},
        "timeout": "10s",
        "retry": RETRY,
        "compensate": {"activity": "pay.refund", "input": {"amount": "${input.amount}"}},
    }
    rest = [
        {"id": "settle", "wait": wait},
        *(extra or []),
        {"id": "ship", "activity": "pay.ship", "timeout": "10s", "retry": RETRY},
    ]
    if parallel:
        pack = {
            "id": "pack",
            "activity": "pay.pack",
            "input": {"amount": "${input.amount}"},
            "timeout": "10s",
        }
        fulfil = {
            "id": "fulfil",
            "parallel": {"branches": {"ship": rest, "pack": [{**pack, "retry": RETRY}]}},
        }
        return {"name": name, "steps": [charge, fulfil]}
    return {"name": name, "steps": [charge, *rest]}


@dataclass
class Outcome:
    """One scenario's result, as it goes into reports/faults.json."""

    name: str
    fault: str
    backend: str
    seed: int
    runs: int
    outcomes: dict[str, int]
    violations: dict[str, int]
    recovery_s: float | None
    injected: dict[str, Any] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    duration_s: float = 0.0
    expect_violations: bool = False
    error: str | None = None

    @property
    def passed(self) -> bool:
        found = any(self.violations.values())
        return self.error is None and (found if self.expect_violations else not found)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "fault": self.fault,
            "backend": self.backend,
            "seed": self.seed,
            "runs": self.runs,
            "outcomes": self.outcomes,
            "violations": self.violations,
            "recovery_s": self.recovery_s,
            "injected": self.injected,
            "examples": self.examples,
            "duration_s": round(self.duration_s, 1),
            "expect_violations": self.expect_violations,
            "passed": self.passed,
            "error": self.error,
        }


@dataclass
class Ctx:
    """A scenario's world: the fleet, its own seeded random stream, and its size."""

    fleet: FaultFleet
    seed: int
    rng: random.Random
    runs: int
    soak: bool
    tenant: str = "default"
    injected: dict[str, Any] = field(default_factory=dict)
    deadline_s: float = 120.0

    def count(self, what: str, n: int = 1) -> None:
        with _COUNT_LOCK:  # driver threads (clients, cutters) count concurrently
            self.injected[what] = int(self.injected.get(what, 0)) + n

    @property
    def engine_service(self) -> Any:
        return self.fleet.engine.service

    def monitor(self) -> Monitor:
        return Monitor(self.fleet.engine, self.tenant)

    def verdict(
        self, expect: Expect | None = None, monitor: Monitor | None = None, refs: bool = False
    ) -> Verdict:
        return check(
            self.fleet.engine, self.fleet.ledger, expect or Expect(tenant=self.tenant), monitor, refs
        )


@dataclass
class Scenario:
    name: str
    fault: str
    body: Callable[[Ctx], tuple[Verdict, float | None]]
    expect_violations: bool = False
    backends: tuple[str, ...] = ("sqlite", "postgresql")
    about: str = ""
    http: bool = False  # every worker a remote one, over the task API of a `lockstep serve`
    server_faults: str = ""  # the fail points of that serve (where a remote worker's reports commit)
    disk: str = ""  # SQLite: its database directory alone on a tmpfs of this size (root; "16m")


def requeue_done_tasks(fleet: FaultFleet, n: int = 3) -> int:
    """As a redelivering queue would: the `n` latest finished tasks put back to `ready`; how many."""
    rows = fleet.sql(
        "UPDATE tasks SET status = 'ready' WHERE task_id IN"
        " (SELECT task_id FROM tasks WHERE status = 'done' ORDER BY created_at DESC LIMIT ?)"
        " RETURNING task_id",
        (n,),
    )
    return len(rows)


def start_runs(ctx: Ctx, n: int, name: str = "pay", **extra: Any) -> list[str]:
    """Start `n` runs of `name` in-process (as the API would), each with a distinct amount and ref."""
    return [
        ctx.fleet.engine.start(name, input={"amount": 100 + i, "ref": f"r{i}", **extra}, tenant=ctx.tenant)
        for i in range(n)
    ]


def unsettled(ctx: Ctx, *, human_ok: bool = True) -> int:
    """Runs that are neither finished nor (with `human_ok`) in an explicit human state; -1 while the
    database is down."""
    try:
        with ctx.fleet.engine.service.read() as tx:
            states = tx.runs(ctx.tenant, status=None, definition=None, after="", limit=100_000)
    except Exception:
        return -1
    return sum(
        1 for s in states if s.status not in TERMINAL and not (human_ok and wait_kind(s) in HUMAN_WAITS)
    )


def settle_time(ctx: Ctx, since: float, *, tick: Callable[[], None] | None = None) -> float | None:
    """Wait until every run settled (`tick` runs on each poll: a supervisor, an operator); return the
    seconds since `since` (monotonic), or None if the scenario's deadline passed first."""
    deadline = time.monotonic() + ctx.deadline_s
    while time.monotonic() < deadline:
        if tick is not None:
            tick()
        if unsettled(ctx) == 0:
            return round(time.monotonic() - since, 2)
        time.sleep(0.1)
    return None


class Supervisor:
    """Keeps a set of processes alive: one that died (killed by a fail point or by the driver) is
    counted and replaced by `spawn(n)`, n counting every process this supervisor started."""

    def __init__(self, size: int, spawn: Callable[[int], Proc]) -> None:
        self.spawn = spawn
        self.spawned = 0
        self.deaths = 0
        self.last_death: float | None = None
        self.procs: list[Proc] = [self._next() for _ in range(size)]

    def _next(self) -> Proc:
        self.spawned += 1
        return self.spawn(self.spawned)

    def tick(self) -> None:
        for k, proc in enumerate(self.procs):
            if not proc.alive():
                self.deaths += 1
                self.last_death = time.monotonic()
                self.procs[k] = self._next()


@contextmanager
def every(interval: float, fn: Callable[[], None]) -> Iterator[None]:
    """Run `fn` every `interval` seconds in a background thread while the block runs (a fault source:
    redelivering rows, re-arming timers). A round that fails (a busy database) is simply skipped."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval):
            with suppress(Exception):
                fn()

    thread = threading.Thread(target=loop, name="faults-every", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
