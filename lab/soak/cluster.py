"""The soak's processes on the fault suite's fleet (PostgreSQL, the downstream payment API, the ledger):
two `lockstep serve`, two schedulers and three workers, each in a `Slot` that a supervisor thread
refills when its process died. A death the fault schedule caused is expected; any other one is counted
with its exit status and the tail of its log (a process that exits on its own under a fault is a
finding the report shows, not something to hide by restarting it quietly).

Worker w2 runs with every attempt delivered twice (`worker.deliver_twice`), worker w3 reaches
PostgreSQL through the TCP proxy that the partitions cut.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from lockstep.testing.pgcluster import PgCluster

from ..faults.faultfleet import FaultFleet
from ..faults.proxy import Proxy
from ..fleet import Proc, free_port

__all__ = ["TENANT", "Cluster", "Death", "Slot"]

TENANT = "soak"
APPROVERS = ("alice", "bob", "carol")
# Generous limits for the steady load; the quota fault lowers max_active_runs for a while.
LIMITS = {
    "--max-active-runs": "100000",
    "--starts-per-second": "1000",
    "--activity-concurrency": "1000",
    "--max-timers": "100000",
}


@dataclass
class Death:
    slot: str
    pid: int
    code: int | None
    expected: bool
    at: float
    log_tail: str = ""


@dataclass
class Slot:
    """One long-lived role (`w1`, `s2`, `api1`...): its current process, how to make the next one, and
    whether the fault schedule is the reason it is down (killed, or stopped with SIGSTOP)."""

    name: str
    kind: str  # worker | scheduler | server
    spawn: Callable[[], Proc]
    proc: Proc | None = None
    generation: int = 0
    killed_by_chaos: bool = False
    stopped: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def respawn(self) -> None:
        self.generation += 1
        self.proc = self.spawn()
        self.killed_by_chaos = False


class Cluster:
    """The fleet, its slots, the proxy of w3, the API keys of the load's client and approvers."""

    def __init__(self, workdir: Path, pg: PgCluster) -> None:
        self.pg = pg
        self.fleet = FaultFleet(workdir, "postgresql", pg)
        f = self.fleet
        f.cli("tenants", "create", TENANT)
        f.cli("tenants", "set", TENANT, *[x for kv in LIMITS.items() for x in kv])
        self.client_key = self._user("client", "operator")
        self.approver_keys = {name: self._user(name, "approver") for name in APPROVERS}
        target = urlsplit(f.db_url)
        self.proxy = Proxy(target.hostname or "127.0.0.1", target.port or 5432)
        self.proxy.start()
        userinfo = target.netloc.rpartition("@")[0]
        self.far_url = urlunsplit(
            target._replace(netloc=f"{userinfo}@127.0.0.1:{self.proxy.port}".lstrip("@"))
        )
        self.ports = {"api1": free_port(), "api2": free_port()}
        self.slots: dict[str, Slot] = {}
        self.deaths: list[Death] = []
        self.spawn_failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _user(self, name: str, roles: str) -> str:
        out = self.fleet.cli("users", "create", name, "--tenant", TENANT, "--roles", roles)
        return str(json.loads(out.stdout)["api_key"])

    @property
    def server_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.ports.values()]

    def start(self) -> None:
        """Every slot's first process, then the supervisor thread."""
        f = self.fleet
        for name, port in self.ports.items():
            self._add(name, "server", partial(f.serve, name, port))
        for name in ("s1", "s2"):
            self._add(name, "scheduler", partial(f.scheduler, name))
        self._add("w1", "worker", partial(f.worker, "w1"))
        self._add("w2", "worker", partial(f.worker, "w2", faults="worker.deliver_twice=on"))
        self._add("w3", "worker", partial(f.worker, "w3", db_url=self.far_url))
        self._thread = threading.Thread(target=self._supervise, name="soak-supervisor", daemon=True)
        self._thread.start()

    def _add(self, name: str, kind: str, spawn: Callable[[], Proc]) -> None:
        slot = Slot(name, kind, spawn)
        slot.respawn()
        self.slots[name] = slot

    def _supervise(self) -> None:
        while not self._stop.wait(0.5):
            for slot in self.slots.values():
                self.tick(slot)

    def tick(self, slot: Slot) -> None:
        """Refill `slot` if its process died (a stopped one is left alone: the fault resumes it)."""
        with slot.lock:
            proc = slot.proc
            if slot.stopped or (proc is not None and proc.alive()):
                return
            if proc is not None:
                code = proc.popen.returncode
                tail = "" if slot.killed_by_chaos else proc.log()[-3000:]
                self.deaths.append(Death(slot.name, proc.pid, code, slot.killed_by_chaos, time.time(), tail))
                proc.close()
                slot.proc = None
            before = len(self.fleet.procs)
            try:
                slot.respawn()
            except Exception:  # the database is down right now, say: the next tick tries again
                self.spawn_failures += 1
                slot.proc = None
                for half_started in self.fleet.procs[before:]:  # (a server must free its port)
                    half_started.close()

    def kill(self, slot: Slot) -> bool:
        with slot.lock:
            if slot.proc is None or not slot.proc.alive() or slot.stopped:
                return False
            slot.killed_by_chaos = True
            slot.proc.signal(signal.SIGKILL)
            return True

    def pause(self, slot: Slot, seconds: float) -> bool:
        """SIGSTOP the slot's process for `seconds` (longer than a lease), then SIGCONT."""
        with slot.lock:
            if slot.proc is None or not slot.proc.alive():
                return False
            slot.stopped = True
            proc = slot.proc
            proc.signal(signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            with contextlib.suppress(ProcessLookupError):
                proc.signal(signal.SIGCONT)
            slot.stopped = False
        return True

    def processes(self) -> list[tuple[str, int]]:
        """(slot, pid) of every live process now."""
        return [(s.name, s.proc.pid) for s in self.slots.values() if s.proc is not None and s.proc.alive()]

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
        for slot in self.slots.values():
            if slot.proc is not None and slot.stopped:
                with contextlib.suppress(ProcessLookupError):
                    slot.proc.signal(signal.SIGCONT)
        self.proxy.stop()
        self.fleet.shutdown()

    def unexpected_deaths(self) -> list[Death]:
        return [d for d in self.deaths if not d.expected]

    def summary(self) -> dict[str, Any]:
        return {
            "generations": {s.name: s.generation for s in self.slots.values()},
            "deaths_expected": sum(1 for d in self.deaths if d.expected),
            "deaths_unexpected": [
                {"slot": d.slot, "pid": d.pid, "code": d.code, "log_tail": d.log_tail[-800:]}
                for d in self.unexpected_deaths()
            ],
            "spawn_failures": self.spawn_failures,
        }
