"""One soak from start to verdict: PostgreSQL and the cluster up, the three processes published, then
load, faults and sampling for `duration` seconds, a drain (no new starts, faults stopped, every run
left to finish), and the checker over the whole history. The checker also runs every `check_every`
seconds while the faults go on, on the runs there are then (a violation found early is kept: it cannot
be fixed by what happens later).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockstep.core.explain import wait_kind
from lockstep.core.state import TERMINAL

from ..faults.checker import CHECKS, Expect, Monitor, Verdict, check
from ..fleet import postgres
from .chaos import Chaos
from .cluster import TENANT, Cluster
from .load import Load, definitions
from .sample import Sampler, latency_by_minute

__all__ = ["Settings", "soak"]

DRAIN_S = 600.0


@dataclass
class Settings:
    duration_s: float
    seed: int = 7
    rate: float = 4.0  # run starts per second
    fault_interval_s: float = 20.0
    sample_s: float = 60.0
    check_every_s: float = 300.0


@dataclass
class _Periodic:
    """The checker every few minutes during the faults: violations other than `stuck` (a run in flight
    is not stuck) are kept with their examples."""

    cluster: Cluster
    every: float
    found: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    passes: list[dict[str, Any]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def stop(self) -> None:
        self._stop.set()

    def loop(self) -> None:
        while not self._stop.wait(self.every):
            t0 = time.monotonic()
            try:
                v = check(self.cluster.fleet.engine, self.cluster.fleet.ledger, Expect(tenant=TENANT))
            except Exception as exc:  # the database is down right now: the next pass has it
                self.passes.append({"error": f"{type(exc).__name__}: {exc}"[:200]})
                continue
            bad = {k: n for k, n in v.violations.items() if n and k != "stuck"}
            for k, n in bad.items():
                self.found[k] = max(self.found.get(k, 0), n)
                self.examples.setdefault(k, v.examples.get(k, [])[:5])
            runs = v.outcomes.get("started", 0)
            self.passes.append(
                {"runs": runs, "violations": sum(bad.values()), "took_s": round(time.monotonic() - t0, 1)}
            )


def _unfinished(cluster: Cluster) -> int | None:
    """Runs not finished and not waiting on an operator (an approval counts: the approvers are still
    deciding); None while the database is down."""
    try:
        with cluster.fleet.engine.service.read() as tx:
            states = tx.runs(TENANT, status=None, definition=None, after="", limit=1_000_000)
    except Exception:
        return None
    return sum(1 for s in states if s.status not in TERMINAL and wait_kind(s) not in ("attention", "paused"))


def soak(settings: Settings, workdir: Path, say: Callable[[str], None] = print) -> dict[str, Any]:
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)  # the outages are on purpose
    rng = random.Random(settings.seed)  # noqa: S311 - a reproducible schedule, not secrets
    with postgres() as pg:
        if pg is None:
            raise RuntimeError("the soak needs PostgreSQL's server binaries (initdb, pg_ctl)")
        cluster = Cluster(workdir, pg)
        try:
            return _soak(settings, cluster, rng, workdir, say)
        finally:
            cluster.stop()


def _soak(
    settings: Settings, cluster: Cluster, rng: random.Random, workdir: Path, say: Callable[[str], None]
) -> dict[str, Any]:
    f = cluster.fleet
    for d in definitions():
        f.engine.publish(d, tenant=TENANT)
    f.control(delay_ms=10)
    cluster.start()
    size0 = int(f.sql("SELECT pg_database_size(current_database())")[0][0])
    load = Load(cluster.server_urls, cluster.client_key, cluster.approver_keys, settings.rate, rng)
    chaos = Chaos(cluster, random.Random(rng.random()), settings.fault_interval_s, workdir / "faults.jsonl")  # noqa: S311
    sampler = Sampler(cluster, settings.sample_s)
    periodic = _Periodic(cluster, settings.check_every_s)
    checker = threading.Thread(target=periodic.loop, name="soak-checker", daemon=True)
    t0 = time.time()
    with Monitor(f.engine, TENANT, interval=2.0) as mon:
        sampler.start()
        load.start()
        chaos.start()
        checker.start()
        end = time.monotonic() + settings.duration_s
        while time.monotonic() < end:
            time.sleep(min(60.0, max(0.0, end - time.monotonic())))
            row = sampler.rows[-1] if sampler.rows else {}
            say(
                f"soak {round((time.time() - t0) / 60, 1)} min: {load.counts['starts acknowledged']} starts "
                f"acknowledged, {sum(chaos.counts.values())} faults, db {row.get('db_mib')} MiB"
            )
        periodic.stop()
        chaos.stop()
        load.stop_starting()
        say("soak: faults stopped, no new starts; draining")
        drain_t0 = time.monotonic()
        while time.monotonic() - drain_t0 < DRAIN_S:
            left = _unfinished(cluster)
            if left == 0:
                break
            time.sleep(1.0)
        drained_s = round(time.monotonic() - drain_t0, 1)
        load.stop()
        checker.join(120)
        sampler.stop()
    say(f"soak: drained in {drained_s} s; checking the whole history")
    verdict = check(f.engine, f.ledger, Expect(tenant=TENANT), mon, refs=True)
    _extra_checks(verdict, cluster, load, periodic)
    histories = _histories(cluster)
    size1 = int(f.sql("SELECT pg_database_size(current_database())")[0][0])
    runs = verdict.outcomes.get("started", 0)
    return {
        "settings": settings.__dict__,
        "duration_min": round((time.time() - t0) / 60, 1),
        "drain_s": drained_s,
        "runs": runs,
        "outcomes": verdict.outcomes,
        "violations": verdict.violations,
        "examples": verdict.examples,
        "periodic_checks": periodic.passes,
        "faults": dict(chaos.counts),
        "faults_skipped": dict(chaos.skipped),
        "fault_details": dict(chaos.details),
        "load": dict(load.counts),
        "server_errors": load.server_errors,
        "cluster": cluster.summary(),
        "samples": sampler.rows,
        "latency": latency_by_minute(histories, t0),
        "db_bytes_per_run": round((size1 - size0) / runs) if runs else None,
        "db_mib": [round(size0 / 2**20, 1), round(size1 / 2**20, 1)],
    }


def _extra_checks(v: Verdict, cluster: Cluster, load: Load, periodic: _Periodic) -> None:
    """What the history alone cannot show: acknowledged starts that are gone, processes that died
    without being killed, 5xx answers other than 503, and what the periodic passes found."""
    with cluster.fleet.engine.service.read() as tx:
        present = set(tx.run_ids(TENANT))
    for key, run_id in load.acknowledged.items():
        if run_id not in present:
            v.flag("runs_lost", f"start {key} was acknowledged as {run_id}, which does not exist")
    for death in cluster.unexpected_deaths():
        v.flag("process_died", f"{death.slot} (pid {death.pid}) exited {death.code}: {death.log_tail[-300:]}")
    for example in load.server_errors:
        v.flag("server_errors", example)
    for k, n in periodic.found.items():
        if k in CHECKS and v.violations.get(k, 0) < n:
            for example in periodic.examples.get(k, [])[: n - v.violations[k]] or [
                f"{n} in a periodic check"
            ]:
                v.flag(k, f"(periodic) {example}")


def _histories(cluster: Cluster) -> dict[str, list[Any]]:
    svc = cluster.fleet.engine.service
    with svc.read() as tx:
        run_ids = tx.run_ids(TENANT)
    out = {}
    for rid in run_ids:
        with svc.read() as tx:
            out[rid] = [e for e, _ in tx.events(rid)]
    return out
