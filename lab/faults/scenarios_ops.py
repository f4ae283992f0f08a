"""Scenarios for faults around the engine rather than one attempt: replayed approval callbacks, a
database outage, a worker partitioned from the database, a queue backlog, an interrupted version
deployment, an exhausted tenant quota (with the client's connection cut by the TCP proxy).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from ..fleet import free_port, sqlite_path, wait_until
from .base import RETRY, Ctx, Supervisor, pay_definition, settle_time, start_runs
from .checker import Expect, Verdict
from .proxy import Proxy

__all__ = [
    "approval_replay",
    "db_outage",
    "db_partition",
    "interrupted_deployment",
    "queue_backlog",
    "quota_exhausted",
]


def _user(ctx: Ctx, name: str, roles: str, tenant: str = "default") -> str:
    out = ctx.fleet.cli("users", "create", name, "--tenant", tenant, "--roles", roles)
    return str(json.loads(out.stdout)["api_key"])


def approval_replay(ctx: Ctx) -> tuple[Verdict, float | None]:
    """Every approval link is double-clicked (two concurrent submits), replayed later, tried by another
    approver and next to a forged token; the server is SIGKILLed and restarted halfway through."""
    f = ctx.fleet
    f.cli("tenants", "create", ctx.tenant, expect=None)  # it may exist already
    keys = {name: _user(ctx, name, "approver") for name in ("alice", "bob", "mallory")}
    approve = {
        "id": "approve",
        "approval": {"approvers": {"users": ["alice", "bob"]}, "quorum": 2, "timeout": "1h"},
    }
    f.engine.publish(pay_definition(wait="10ms", extra=[approve]), tenant=ctx.tenant)
    notify = f"webhook:{f.downstream_url}/notify"
    port = free_port()
    server = f.serve("serve1", port, notify=notify)
    f.worker("w1")
    answers: Counter[str] = Counter()
    accepted: Counter[str] = Counter()
    lock = threading.Lock()

    def submit(base: str, who: str, token: str, label: str) -> None:
        try:
            r = httpx.post(
                f"{base}/v1/approvals/decide",
                json={"token": token, "decision": "approve"},
                headers={"Authorization": f"Bearer {keys[who]}"},
                timeout=30,
            )
            code = str(r.status_code)
        except httpx.HTTPError:
            code = "no answer"
        with lock:
            answers[f"{label}: {code}"] += 1
            if code.startswith("2"):
                accepted[token] += 1

    with ctx.monitor() as mon:
        start_runs(ctx, ctx.runs)

        def delivered() -> list[dict[str, Any]]:
            found = f.ledger.notifications()
            return found if len(found) >= 2 * ctx.runs else []

        links = wait_until(delivered, ctx.deadline_s, "every approval link to be delivered to the webhook")
        half = len(links) // 2
        base = f"http://127.0.0.1:{port}"
        for i, link in enumerate(links):
            if i == half:  # the server dies with decisions half done; a new one takes over
                server.kill()
                ctx.count("server SIGKILLed mid-way")
                port = free_port()
                f.serve("serve2", port, notify=notify)
                base = f"http://127.0.0.1:{port}"
            token, who = str(link["body"]["token"]), str(link["body"]["approver"])
            with ThreadPoolExecutor(2) as pool:  # the double click
                for _ in range(2):
                    pool.submit(submit, base, who, token, "double click")
            submit(base, who, token, "replay")
            submit(base, "mallory", token, "someone else's link")
            submit(base, who, secrets.token_urlsafe(32), "forged token")
        t0 = time.monotonic()
        settled = settle_time(ctx, t0)
    v = ctx.verdict(monitor=mon)
    for n in accepted.values():
        if n > 1:
            v.flag("tokens_consumed_twice", f"a link was accepted {n} times over HTTP")
    for label, n in sorted(answers.items()):
        ctx.count(label, n)
        if label.split(": ")[0] != "double click" and label.endswith((": 200", ": 201", ": 500")):
            v.flag("tokens_consumed_twice", f"{label} x{n}")
    ctx.count("links delivered", len(links))
    return v, settled


SQLITE_LOCKER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("UPDATE runs SET updated_at = updated_at")
print("holding the write lock", flush=True)
time.sleep(600)
"""


def db_outage(ctx: Ctx) -> tuple[Verdict, float | None]:
    """Mid-load the database goes away: PostgreSQL is stopped with `pg_ctl stop -m immediate` (a crash,
    no checkpoint) and started again; on SQLite a process holding the write lock inside a transaction
    is SIGKILLed (its transaction vanishes, everyone else waited on the lock)."""
    f = ctx.fleet
    f.engine.publish(pay_definition(), tenant=ctx.tenant)
    f.control(delay_ms=20)
    sched = Supervisor(1, lambda n: f.scheduler(f"s{n}"))
    workers = Supervisor(2, lambda n: f.worker(f"w{n}"))
    outage = 2.0 if not ctx.soak else 10.0

    def tick() -> None:
        workers.tick()
        sched.tick()

    with ctx.monitor() as mon:
        start_runs(ctx, ctx.runs)
        wait_until(f.ledger.effects, 30, "the first effects")
        if f.backend == "postgresql" and f.pg is not None:
            f.pg.stop("immediate")
            ctx.count("PostgreSQL stopped (immediate)")
            time.sleep(outage)  # the outage itself: time passing is the fault
            f.pg.start()
        else:
            locker = subprocess.Popen(  # noqa: S603 - our own script
                [sys.executable, "-c", SQLITE_LOCKER, str(sqlite_path(f.db_url))],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            if locker.stdout is not None:
                locker.stdout.readline()  # the lock is held from here on
            time.sleep(outage)
            locker.kill()
            locker.wait(10)
            if locker.stdout is not None:
                locker.stdout.close()
            ctx.count("SQLite writer SIGKILLed inside a transaction")
        back = time.monotonic()
        ctx.count("outage seconds", int(outage))
        settled = settle_time(ctx, back, tick=tick)
    ctx.count("processes that exited during the outage", workers.deaths + sched.deaths)
    return ctx.verdict(monitor=mon), settled


def db_partition(ctx: Ctx) -> tuple[Verdict, float | None]:
    """PostgreSQL (SQLite has no network): one of two workers reaches the database through a TCP proxy
    that cuts all its connections while it holds leases, several times, each cut longer than the lease;
    the other worker and the scheduler keep their link. The cut-off worker keeps its finished results
    and reports them once the link is back (stale ones become ResultIgnored); meanwhile its leases
    expire and those attempts run again on the other worker with the same key."""
    f = ctx.fleet
    f.engine.publish(pay_definition(), tenant=ctx.tenant)
    f.control(delay_ms=150)  # attempts last long enough to be in flight when the link goes
    target = urlsplit(f.db_url)
    proxy = Proxy(target.hostname or "127.0.0.1", target.port or 5432)
    proxy.start()
    userinfo = target.netloc.rpartition("@")[0]
    far_url = urlunsplit(target._replace(netloc=f"{userinfo}@127.0.0.1:{proxy.port}".lstrip("@")))
    sched = Supervisor(1, lambda n: f.scheduler(f"s{n}"))
    near = Supervisor(1, lambda n: f.worker(f"near{n}"))
    far = Supervisor(1, lambda n: f.worker(f"far{n}", db_url=far_url))
    cuts, cut_s = (8, 3.0) if ctx.soak else (3, 2.0)  # the lease is 1 s

    def tick() -> None:
        for s in (sched, near, far):
            s.tick()

    def far_leases() -> int:
        sql = "SELECT count(*) FROM tasks WHERE status = 'leased' AND lease_owner LIKE ?"
        return int(f.sql(sql, ("far%",))[0][0])

    try:
        with ctx.monitor() as mon:
            for wave in range(cuts):
                start_runs(ctx, max(4, ctx.runs // cuts), wave=wave)
                # The cut must land on work: after a heal the far worker needs a moment (its retry
                # back-off) while the near one drains the wave, so top up until the far one is busy.
                deadline = time.monotonic() + 30
                while far_leases() == 0 and time.monotonic() < deadline:
                    start_runs(ctx, 4, wave=wave, top_up=True)
                    time.sleep(0.3)
                wait_until(lambda: far_leases() > 0, 5, "the far worker to hold leases")
                ctx.count("leases the far worker held when cut off", far_leases())
                proxy.cut()
                ctx.count("partitions: the far worker cut off from PostgreSQL")
                time.sleep(cut_s)  # the partition itself: time passing is the fault
                proxy.heal()
                tick()
            back = time.monotonic()
            settled = settle_time(ctx, back, tick=tick)
    finally:
        proxy.stop()
    timed_out = int(f.sql("SELECT count(*) FROM events WHERE type = 'ActivityTimedOut'")[0][0])
    ignored = int(f.sql("SELECT count(*) FROM events WHERE type = 'ResultIgnored'")[0][0])
    ctx.count("leases expired during the partitions (attempt retried elsewhere)", timed_out)
    ctx.count("late results recorded as ResultIgnored", ignored)
    ctx.count("processes that exited during the partitions", sched.deaths + near.deaths + far.deaths)
    if timed_out == 0:  # the fault never reached an attempt: this run proves nothing
        raise RuntimeError("db_partition: no lease expired during the partitions")
    return ctx.verdict(monitor=mon), settled


def queue_backlog(ctx: Ctx) -> tuple[Verdict, float | None]:
    """Runs pile up with no worker at all (a backlog five times the usual size); then workers start, one
    is SIGKILLed while draining and replaced."""
    f = ctx.fleet
    f.engine.publish(pay_definition(wait="10ms"), tenant=ctx.tenant)
    f.scheduler("s1")
    n = ctx.runs * 5
    with ctx.monitor() as mon:
        start_runs(ctx, n)
        ready = f.sql("SELECT count(*) FROM tasks WHERE status = 'ready'")[0][0]
        ctx.count("tasks queued before any worker", int(ready))
        t0 = time.monotonic()
        workers = Supervisor(2, lambda k: f.worker(f"w{k}"))
        wait_until(lambda: len(f.ledger.effects()) >= n // 3, ctx.deadline_s, "a third of the backlog")
        workers.procs[0].kill()
        ctx.count("worker SIGKILLed while draining")
        settled = settle_time(ctx, t0, tick=workers.tick)
    return ctx.verdict(monitor=mon), settled


def interrupted_deployment(ctx: Ctx) -> tuple[Verdict, float | None]:
    """v1 workers run v1 runs; v2 is published and v2 workers start; a v1 worker is SIGKILLed mid-flight,
    the runs of v1 are migrated in bulk half-way, a v2 worker is SIGKILLed too; the old worker that is
    left finishes what could not migrate. No task may run on a worker of another version."""
    f = ctx.fleet
    # v1 runs wait long enough on their timer to be caught by the migration half-way.
    f.engine.publish(pay_definition(wait="3s"), tenant=ctx.tenant)
    f.control(delay_ms=30)
    f.scheduler("s1")
    v1 = [f.worker(f"v1-{k}", versions=["pay:1"]) for k in ("a", "b")]
    allowed = {"v1-a": {1}, "v1-b": {1}, "v2-a": {2}, "v2-b": {2}}
    audit = {"id": "audit", "activity": "pay.ship", "timeout": "10s", "retry": RETRY}
    with ctx.monitor() as mon:
        start_runs(ctx, ctx.runs // 2)
        f.engine.publish(pay_definition(wait="500ms", extra=[audit]), tenant=ctx.tenant)
        v2a = f.worker("v2-a", versions=["pay:2"])
        start_runs(ctx, ctx.runs - ctx.runs // 2)
        v1[0].kill()
        ctx.count("v1 worker SIGKILLed mid-flight")
        out = f.cli(
            "--tenant", ctx.tenant, "migrate", "--definition", "pay", "--from-version", "1",
            "--to-version", "2", "--reason", "deploy v2", expect=None,
        )  # fmt: skip
        report = _json_or_none(out.stdout)
        if isinstance(report, dict):
            ctx.count("runs migrated to v2", int(report["migrated"]))
            ctx.count("runs not migrated (stay on v1)", int(report["runs"]) - int(report["migrated"]))
        else:
            ctx.count(f"bulk migrate exited {out.returncode}")
        v2a.kill()
        ctx.count("v2 worker SIGKILLed")
        f.worker("v2-b", versions=["pay:2"])
        t0 = time.monotonic()
        settled = settle_time(ctx, t0)
    return ctx.verdict(Expect(worker_versions=allowed, tenant=ctx.tenant), mon), settled


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def quota_exhausted(ctx: Ctx) -> tuple[Verdict, float | None]:
    """A tenant with 5 active runs and 2 concurrent attempts at most is sent three times that many
    starts over HTTP, through a TCP proxy that cuts the client's connections now and then; the client
    retries 429s after Retry-After and lost answers with the same Idempotency-Key."""
    f = ctx.fleet
    tenant = ctx.tenant = "quota"
    f.cli("tenants", "create", tenant)
    limits = {"max_active_runs": 5, "activity_concurrency": 2}
    f.cli("tenants", "set", tenant, "--max-active-runs", "5", "--activity-concurrency", "2")
    key = _user(ctx, "client", "operator", tenant)
    f.engine.publish(pay_definition(wait="10ms"), tenant=tenant)
    port = free_port()
    f.serve("serve1", port)
    proxy = Proxy("127.0.0.1", port)
    proxy.start()
    f.scheduler("s1")
    for k in (1, 2):
        f.worker(f"w{k}")
    n = ctx.runs
    stop = threading.Event()

    def start(i: int) -> None:
        body = {"definition": "pay", "input": {"amount": 100 + i, "ref": f"r{i}"}}
        headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": f"start-r{i}"}
        while not stop.is_set():
            try:
                r = httpx.post(
                    f"http://127.0.0.1:{proxy.port}/v1/runs", json=body, headers=headers, timeout=10
                )
            except httpx.HTTPError:
                ctx.count("start answers lost (retried, same key)")
                continue
            if r.status_code == 429:
                ctx.count("429 Too Many Requests")
                stop.wait(min(float(r.headers.get("Retry-After", "1")), 0.5))
                continue
            ctx.count(f"start answered {r.status_code}")
            return

    def cutter() -> None:
        while not stop.wait(ctx.rng.uniform(0.3, 0.8)):
            proxy.cut()
            ctx.count("proxy cuts")
            stop.wait(0.1)
            proxy.heal()

    try:
        with ctx.monitor() as mon:
            cut = threading.Thread(target=cutter, daemon=True)
            cut.start()
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(start, range(n)))
            stop.set()
            cut.join()
            proxy.heal()
            t0 = time.monotonic()
            settled = settle_time(ctx, t0)
    finally:
        stop.set()
        proxy.stop()
    expect = Expect(tenant=tenant, max_active_runs=limits["max_active_runs"], max_concurrency=2)
    v = ctx.verdict(expect, mon, refs=True)
    if v.outcomes.get("started", 0) != n:
        v.flag("stuck", f"{v.outcomes.get('started', 0)} runs exist for {n} starts the client made")
    return v, settled
