"""External events under faults: `event_replay` sends every run's event twice at once, in shuffled order
(some before the run waits: buffered, consumed by the scheduler's pass), replays each later, and sends
decoys (another tenant's publisher, the same key under a new id once the run moved on); for a part of
the runs the event comes through a minted callback instead, posted twice at once and replayed. The
server is SIGKILLed and restarted halfway. The checker's `events_consumed_twice` (eventcheck.py) must
find no run that took an event twice; every run must end (a lost event leaves one stuck), and no
callback may be accepted twice over HTTP."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from ..fleet import free_port, wait_until
from .base import Ctx, pay_definition, settle_time, start_runs
from .checker import Verdict

__all__ = ["event_replay"]

WAIT = {
    "id": "arrived",
    "wait_event": {"name": "goods-arrived", "key": "${input.ref}", "timeout": "1h", "callback": True},
}


def _key(ctx: Ctx, name: str, roles: str, tenant: str) -> str:
    out = ctx.fleet.cli("users", "create", name, "--tenant", tenant, "--roles", roles)
    return str(json.loads(out.stdout)["api_key"])


def event_replay(ctx: Ctx) -> tuple[Verdict, float | None]:
    """Events twice at once and out of order, replays, decoys and callbacks replayed, across a server
    SIGKILL; every run ends having taken its event once."""
    f = ctx.fleet
    f.cli("tenants", "create", ctx.tenant, expect=None)
    f.cli("tenants", "create", "decoy", expect=None)
    publisher = {"Authorization": f"Bearer {_key(ctx, 'partner', 'publisher', ctx.tenant)}"}
    operator = {"Authorization": f"Bearer {_key(ctx, 'ops', 'operator', ctx.tenant)}"}
    decoy = {"Authorization": f"Bearer {_key(ctx, 'intruder', 'publisher', 'decoy')}"}
    f.engine.publish(pay_definition(wait="10ms", extra=[WAIT]), tenant=ctx.tenant)
    port = free_port()
    server = f.serve("serve1", port)
    f.worker("w1")
    f.scheduler("s1")
    answers: Counter[str] = Counter()
    accepted: Counter[str] = Counter()
    lock = threading.Lock()
    base = [f"http://127.0.0.1:{port}"]

    def post(path: str, label: str, body: Any, headers: dict[str, str] | None = None) -> None:
        try:
            r = httpx.post(f"{base[0]}{path}", json=body, headers=headers or {}, timeout=30)
            code = str(r.status_code)
        except httpx.HTTPError:
            code = "no answer"
        with lock:
            answers[f"{label}: {code}"] += 1
            if label.startswith("callback") and code == "200":
                accepted[path] += 1

    def event(ref: str, eid: str) -> dict[str, Any]:
        return {"name": "goods-arrived", "key": ref, "id": eid, "payload": {"ref": ref}}

    with ctx.monitor() as mon:
        runs = start_runs(ctx, ctx.runs)
        refs = [f"r{i}" for i in range(len(runs))]
        by_callback = set(ctx.rng.sample(range(len(runs)), len(runs) // 3))
        order = [i for i in range(len(runs)) if i not in by_callback]
        ctx.rng.shuffle(order)
        half = len(order) // 2
        for n, i in enumerate(order):
            if n == half:
                server.kill()
                ctx.count("server SIGKILLed mid-way")
                port = free_port()
                f.serve("serve2", port)
                base[0] = f"http://127.0.0.1:{port}"
            ref = refs[i]
            with ThreadPoolExecutor(2) as pool:  # the same event twice at once
                for _ in range(2):
                    pool.submit(post, "/v1/events", "event twice", event(ref, f"e-{ref}"), publisher)
            post("/v1/events", "other tenant's publisher", event(ref, f"x-{ref}"), decoy)
        for i in order:  # the replays, later and in another order
            post("/v1/events", "replay", event(refs[i], f"e-{refs[i]}"), publisher)
        for i in sorted(by_callback):
            run = runs[i]

            def waiting(run: str = run) -> bool:
                return "arrived" in f.engine.service.state(ctx.tenant, run).event_waits

            wait_until(waiting, ctx.deadline_s, f"run {run} to wait for its event")
            r = httpx.post(
                f"{base[0]}/v1/runs/{run}/callbacks", json={"step": "arrived"}, headers=operator, timeout=30
            )
            token = str(r.json()["token"])
            path = f"/v1/callbacks/{token}"
            with ThreadPoolExecutor(2) as pool:  # the double post
                for _ in range(2):
                    pool.submit(post, path, "callback twice", {"ref": refs[i]})
            post(path, "callback replay", {"ref": refs[i]})
        for i in order[: max(1, len(order) // 4)]:  # the same key under a new id, after the run moved on
            post("/v1/events", "new id, same key", event(refs[i], f"late-{refs[i]}"), publisher)
        t0 = time.monotonic()
        settled = settle_time(ctx, t0)
    v = ctx.verdict(monitor=mon)
    for path, n in accepted.items():
        if n > 1:
            v.flag("events_consumed_twice", f"callback {path[:30]}... accepted {n} times over HTTP")
    for label, n in sorted(answers.items()):
        ctx.count(label, n)
        if label.startswith("callback replay") and label.endswith(": 200"):
            v.flag("events_consumed_twice", f"{label} x{n}")
        if label.endswith(": 500"):
            v.flag("server_errors", f"{label} x{n}")
    ctx.count("events by callback", len(by_callback))
    return v, settled
