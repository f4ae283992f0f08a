"""The soak's fault schedule: one fault at a time, at seeded random moments (every `interval` seconds on
average), each kind once first (in a seeded order) and then drawn at random from every kind. Each
injection is logged (faults.jsonl in the work directory: when, what, on which process, how long) and
counted by kind for the report.

A fault that cannot land right now (its target is down already, say) is logged as skipped, not
retried: the schedule stays a function of the seed and the clock.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..faults.base import requeue_done_tasks
from .cluster import TENANT, Cluster, Slot
from .load import definitions

__all__ = ["Chaos"]

PAUSE_S = 3.0  # SIGSTOP this long: three leases of the fleet's 1 s
PARTITION_S = 3.0
PG_DOWN_S = 2.0
WINDOW_S = 15.0  # lost responses, redeliveries and the low quota last this long


class Chaos:
    def __init__(self, cluster: Cluster, rng: random.Random, interval: float, log: Path) -> None:
        self.cluster = cluster
        self.rng = rng
        self.interval = interval
        self.log_path = log
        self.counts: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.details: Counter[str] = Counter()  # what the faults did: tasks requeued, runs migrated
        self.versions = {"pay": 1}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.kinds: dict[str, Callable[[], str | None]] = {
            "SIGKILL worker": lambda: self._kill("worker"),
            "SIGKILL scheduler": lambda: self._kill("scheduler"),
            "SIGKILL server": lambda: self._kill("server"),
            "SIGSTOP worker": lambda: self._pause("worker"),
            "SIGSTOP scheduler": lambda: self._pause("scheduler"),
            "SIGSTOP server": lambda: self._pause("server"),
            "PostgreSQL restart (fast)": self._pg_restart,
            "PostgreSQL stop (immediate)": self._pg_crash,
            "network partition (w3 cut from PostgreSQL)": self._partition,
            "lost responses (downstream drops 30%, fails 10%)": self._lost_responses,
            "duplicate deliveries (finished tasks requeued)": self._redeliver,
            "quota exhausted (max 5 active runs)": self._quota,
            "version deployed, running runs migrated": self._deploy,
        }

    # --- schedule -----------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="soak-chaos", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)

    def _loop(self) -> None:
        names = list(self.kinds)
        first = self.rng.sample(names, len(names))  # every kind once (in a seeded order), then at random
        while not self._stop.wait(self.rng.uniform(0.5, 1.5) * self.interval):
            kind = first.pop() if first else self.rng.choice(names)
            t0 = time.time()
            try:
                target = self.kinds[kind]()
            except Exception as exc:  # an injection that failed is logged; the soak goes on
                self._log({"at": t0, "kind": kind, "error": f"{type(exc).__name__}: {exc}"[:500]})
                self.skipped[kind] += 1
                continue
            if target is None:
                self.skipped[kind] += 1
                self._log({"at": t0, "kind": kind, "skipped": True})
                continue
            self.counts[kind] += 1
            self._log({"at": t0, "kind": kind, "target": target, "took_s": round(time.time() - t0, 2)})

    def _log(self, entry: dict[str, Any]) -> None:
        with self.log_path.open("a") as out:
            out.write(json.dumps(entry) + "\n")

    def _pick(self, kind: str) -> Slot:
        slots = [s for s in self.cluster.slots.values() if s.kind == kind]
        return self.rng.choice(slots)

    # --- the faults ---------------------------------------------------------------------------------
    def _kill(self, kind: str) -> str | None:
        slot = self._pick(kind)
        return slot.name if self.cluster.kill(slot) else None

    def _pause(self, kind: str) -> str | None:
        slot = self._pick(kind)
        return slot.name if self.cluster.pause(slot, PAUSE_S) else None

    def _pg_restart(self) -> str:
        self.cluster.pg.restart("fast")
        return "postgresql"

    def _pg_crash(self) -> str:
        self.cluster.pg.stop("immediate")
        try:
            time.sleep(PG_DOWN_S)  # the outage itself: time passing is the fault
        finally:
            self.cluster.pg.start()
        return "postgresql"

    def _partition(self) -> str:
        self.cluster.proxy.cut()
        try:
            time.sleep(PARTITION_S)
        finally:
            self.cluster.proxy.heal()
        return "w3"

    def _lost_responses(self) -> str:
        f = self.cluster.fleet
        f.control(drop_rate=0.3, fail_rate=0.1, seed=self.rng.randint(1, 10**6))
        try:
            time.sleep(WINDOW_S)
        finally:
            f.control(reset=True, delay_ms=10)
        return "downstream"

    def _redeliver(self) -> str:
        """As a redelivering queue would: tasks already done put back to ready, a few at a time."""
        f = self.cluster.fleet
        requeued = 0
        deadline = time.monotonic() + WINDOW_S
        while time.monotonic() < deadline:
            requeued += requeue_done_tasks(f)
            time.sleep(0.5)
        self.details["tasks requeued after they were done"] += requeued
        return f"{requeued} tasks"

    def _quota(self) -> str:
        f = self.cluster.fleet
        f.cli("tenants", "set", TENANT, "--max-active-runs", "5")
        try:
            time.sleep(WINDOW_S)
        finally:
            f.cli("tenants", "set", TENANT, "--max-active-runs", "100000")
        return TENANT

    def _deploy(self) -> str:
        """Publish the next version of `pay` (an extra step on odd versions, none on even ones) and
        migrate the running runs of the previous one to it; runs that cannot move stay where they are."""
        f = self.cluster.fleet
        old = self.versions["pay"]
        base = next(d for d in definitions() if d["name"] == "pay")
        steps = [{**s, "wait": f"{2000 + old}ms"} if s["id"] == "settle" else s for s in base["steps"]]
        if old % 2 == 1:  # (each version differs: identical content would return the old version)
            steps.append({"id": "audit", "activity": "pay.ship", "timeout": "10s"})
        new = int(f.engine.publish({**base, "steps": steps}, tenant=TENANT)["version"])
        self.versions["pay"] = new
        out = f.cli(
            "--tenant", TENANT, "migrate", "--definition", "pay", "--from-version", str(old),
            "--to-version", str(new), "--reason", f"soak deploy v{new}", expect=None, timeout=900,
        )  # fmt: skip
        try:
            report = json.loads(out.stdout)
            moved = int(report.get("migrated", 0))
            self.details["runs migrated to a new version"] += moved
            return f"pay v{old} -> v{new}: {moved} of {report.get('runs')} migrated"
        except (ValueError, AttributeError):
            return f"pay v{old} -> v{new}: migrate exited {out.returncode}"
