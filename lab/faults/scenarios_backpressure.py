"""Backpressure at scale: many more starts than workers can run, sent to a `lockstep serve` as fast as
a pool of clients can, each honouring the Retry-After of a 429 (as lockstep.client does).

Measured: starts accepted and refused (429 backlog_full), the largest ready backlog seen (never far
over max_tenant_backlog), serve's resident memory over the load (flat: the backlog lives in the
database, not in the server), and the time from the last accepted start until every run finished.
`python -m lab.faults --only backpressure --runs 4000 --backend postgresql` starts 100,000 runs.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from ..fleet import free_port, wait_until
from .base import Ctx, settle_time
from .checker import Verdict

__all__ = ["STARTS_PER_RUN", "backpressure"]

STARTS_PER_RUN = 25  # --runs N starts N * 25 runs (40: 1,000; 4,000: 100,000)
CLIENTS = 8
# Up to 10,000 starts the runs charge through the downstream (the checker counts each effect once);
# beyond, a no-op activity, so the drain measures the engine and not the downstream's ledger.
EFFECT_STARTS = 10_000


def _definition(activity: str) -> dict[str, object]:
    step = {"id": "one", "activity": activity, "input": {"amount": 1}, "timeout": "30s"}
    return {"name": "load", "steps": [step]}


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def backpressure(ctx: Ctx) -> tuple[Verdict, float | None]:
    """Starts at full speed into a backlog bounded at 1/50 of them (at least 200); once it is full, 2
    workers start and drain it."""
    f = ctx.fleet
    total = ctx.runs * STARTS_PER_RUN
    cap = max(200, total // 50)
    f.engine.publish(_definition("pay.charge" if total <= EFFECT_STARTS else "load.noop"), tenant=ctx.tenant)
    key = f.engine.service.principals.create_user(ctx.tenant, "starter", ["operator"], []).api_key
    f.env["LOCKSTEP_LIMITS"] = f"max_tenant_backlog={cap},max_backlog={cap * 2}"
    serve = f.serve("serve1", free_port())
    del f.env["LOCKSTEP_LIMITS"]
    f.scheduler("s1")
    answers: Counter[str] = Counter()
    lock = threading.Lock()
    remaining = [total]
    rss: list[int] = []
    ready_seen = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            rss.append(_rss_kib(serve.pid))
            ready = f.sql("SELECT count(*) FROM tasks WHERE status = 'ready'")[0][0]
            ready_seen[0] = max(ready_seen[0], int(ready))

    def client() -> None:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=str(serve.url), headers=headers, timeout=60) as http:
            while True:
                with lock:
                    if remaining[0] == 0:
                        return
                    remaining[0] -= 1
                while True:
                    r = http.post("/v1/runs", json={"definition": "load"})
                    with lock:
                        answers[str(r.status_code)] += 1
                    if r.status_code != 429:
                        break
                    time.sleep(float(r.headers.get("Retry-After", "1")))
                if r.status_code != 201:
                    with lock:
                        answers[f"{r.status_code}: {r.text[:200]}"] += 1

    sampler = threading.Thread(target=sample, name="faults-rss", daemon=True)
    sampler.start()
    t0 = time.monotonic()
    with ThreadPoolExecutor(CLIENTS) as pool:
        for _ in range(CLIENTS):
            pool.submit(client)
        # The workers start once the backlog is full (the first 429): whatever this machine's speed,
        # the starts outrun them, and the bound is what holds the queue.
        wait_until(lambda: answers["429"] > 0 or remaining[0] == 0, ctx.deadline_s, "the first 429")
        full_at = time.monotonic()
        workers = [f.worker(f"w{k}") for k in (1, 2)]
    started = time.monotonic()
    ctx.deadline_s = max(ctx.deadline_s, total / 50)
    settled = settle_time(ctx, started)
    stop.set()
    sampler.join()
    v = ctx.verdict()
    if answers["429"] == 0:
        raise RuntimeError(f"every one of {total} starts was accepted: the backlog bound was never reached")
    for what, n in answers.items():
        if what.startswith("5") or ": " in what:
            v.flag("server_errors", f"{what} x{n}")
    for proc in [serve, *workers]:
        if not proc.alive():
            v.flag("process_died", f"{proc.name} died under backpressure")
    ctx.injected.update(
        {
            "starts": total,
            "backlog limit (max_tenant_backlog)": cap,
            "starts accepted (201)": answers["201"],
            "starts refused (429)": answers["429"],
            "largest ready backlog seen": ready_seen[0],
            "serve RSS MiB at 10% of the load": round(rss[len(rss) // 10] / 1024, 1) if rss else 0,
            "serve RSS MiB peak": round(max(rss, default=0) / 1024, 1),
            "serve RSS MiB at the end": round(rss[-1] / 1024, 1) if rss else 0,
            "seconds until the first 429 (no worker yet)": round(full_at - t0, 1),
            "seconds to send every start": round(started - t0, 1),
            "seconds to drain after the last start": settled,
        }
    )
    return v, settled
