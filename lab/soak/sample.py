"""What the soak measures while it runs, once per `every` seconds: the resident memory and open file
descriptors of every lockstep process (and of the driver and PostgreSQL's processes together), the
database's size, and the runs there are. Latency per minute comes afterwards from the event log
(`latency_by_minute`): a run's first event to its terminal event, by the minute it finished.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .cluster import Cluster

__all__ = ["Sampler", "latency_by_minute", "percentile", "proc_usage"]


def proc_usage(pid: int) -> tuple[float, int] | None:
    """(resident MiB, open file descriptors) of `pid`, None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024, fds
    return None


def _pss_mib(pid: int) -> float:
    """Proportional set size: shared memory (PostgreSQL's buffers) counted once over its sharers."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _postgres_rss(data_dir: Path) -> float:
    """The memory (PSS MiB) of every process of the PostgreSQL cluster, postmaster and backends."""
    try:
        master = int((data_dir / "postmaster.pid").read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return 0.0
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if int(entry) == master or (len(fields) > 1 and fields[1] == str(master)):
            total += _pss_mib(int(entry))
    return total


@dataclass
class Sampler:
    cluster: Cluster
    every: float = 60.0
    t0: float = field(default_factory=time.time)
    rows: list[dict[str, Any]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="soak-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def sample(self) -> None:
        """One row: minute, per process (slot, pid, MiB, fds), database MiB and run count."""
        procs = {}
        for slot, pid in self.cluster.processes():
            usage = proc_usage(pid)
            if usage is not None:
                procs[slot] = {"pid": pid, "rss_mib": round(usage[0], 1), "fds": usage[1]}
        driver = proc_usage(os.getpid())
        if driver is not None:
            procs["driver"] = {"pid": os.getpid(), "rss_mib": round(driver[0], 1), "fds": driver[1]}
        row: dict[str, Any] = {
            "minute": round((time.time() - self.t0) / 60, 2),
            "procs": procs,
            "postgres_rss_mib": round(_postgres_rss(self.cluster.pg.data), 1),
            "load1": round(os.getloadavg()[0], 1),  # the machine's load: latency is read against it
        }
        try:
            db = self.cluster.fleet.sql(
                "SELECT pg_database_size(current_database()), (SELECT count(*) FROM runs)"
            )
            row["db_mib"] = round(int(db[0][0]) / 2**20, 2)
            row["runs"] = int(db[0][1])
        except Exception:  # the database is down at this very moment: the next row has it
            row["db_mib"] = row["runs"] = None
        self.rows.append(row)


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def latency_by_minute(histories: dict[str, list[Any]], t0: float) -> list[dict[str, Any]]:
    """Per minute of the soak: runs finished without a person in the loop, their p50 and p99 seconds
    from start to end; runs with an approval separately (their latency is the approvers')."""
    buckets: defaultdict[int, dict[str, list[float]]] = defaultdict(lambda: {"auto": [], "approval": []})
    for events in histories.values():
        if not events or events[-1].type not in ("RunCompleted", "RunFailed", "RunCancelled"):
            continue
        first, last = _ts(events[0].at), _ts(events[-1].at)
        human = any(e.type.startswith("Approval") for e in events)
        minute = int((last - t0) // 60)
        buckets[minute]["approval" if human else "auto"].append(last - first)
    out = []
    for minute in sorted(buckets):
        auto, appr = buckets[minute]["auto"], buckets[minute]["approval"]
        out.append(
            {
                "minute": minute,
                "finished": len(auto) + len(appr),
                "p50_s": _r(percentile(auto, 50)),
                "p99_s": _r(percentile(auto, 99)),
                "approval_p50_s": _r(percentile(appr, 50)),
            }
        )
    return out


def _ts(at: str) -> float:
    return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)
