"""A rolling upgrade under load, on PostgreSQL: an older lockstep (built from an older commit with an
older schema, as a wheel in its own venv: lab/fleet/oldbuild.py) runs a server, a scheduler and two
workers while a client keeps starting runs; the current build's `db upgrade` migrates the schema under
them; current processes join (old and new side by side, the client using both servers); then the old
ones go, one old worker SIGKILLed mid-flight and the rest stopped with SIGTERM (drain). An old worker
started after the upgrade is refused with the "newer than this lockstep" message. The checker reads the
whole history with the current build.

The fleet's own database (current schema) stays unused: the upgrade needs a database the old build set
up, so the scenario makes one on the same cluster.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import httpx

from lockstep.core.state import TERMINAL
from lockstep.engine import Engine

from ..fleet import Proc, free_port, wait_until
from ..fleet.oldbuild import OldBuild, old_build
from .base import Ctx, pay_definition
from .checker import Expect, Monitor, Verdict, check
from .faultfleet import ACTIVITIES

__all__ = ["OLD_COMMIT", "upgrade_under_load"]

# The build before migration approvals and the runs search (PostgreSQL schema 13; the current build
# adds migrations 14 and up).
OLD_COMMIT = "a5017e2215c496a3f998fc7e5aa458f16c758fe6"
TENANT = "up"
WORKER_ARGS = ["--poll-interval", "50ms", "--concurrency", "8", "--lease-ttl", "1s", "--no-scheduler"]


class _Old:
    """The old build's processes on `url`: its interpreter, and its own lab/ for the activities."""

    def __init__(self, ctx: Ctx, build: OldBuild, url: str) -> None:
        self.f = ctx.fleet
        self.build = build
        self.url = url
        paths = [str(build.tree)]
        self.env = {**self.f.env, "PYTHONPATH": ":".join(paths)}

    def argv(self, *args: str) -> list[str]:
        return [str(self.build.python), "-m", "lockstep", "--db", self.url, *args]

    def cli(self, *args: str) -> str:
        done = subprocess.run(  # noqa: S603 - argv built here
            self.argv(*args),
            env=self.env,
            cwd=self.f.dir,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"old lockstep {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}"
            )
        return done.stdout

    def spawn(self, name: str, *args: str, ready: str | None = None) -> Proc:
        proc = self.f.popen(name, self.argv(*args), self.env)
        if ready is not None:
            self.f.wait_ready(proc, ready)
        return proc


class _Client:
    """Starts a run every 50 ms on whichever server is listed, each with its own key, retried with it."""

    def __init__(self, ctx: Ctx, key: str) -> None:
        self.ctx = ctx
        self.key = key
        self.servers: list[str] = []
        self.acknowledged: dict[str, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="upgrade-client", daemon=True)

    def _loop(self) -> None:
        n = 0
        while not self.stop.wait(0.05):
            n += 1
            ref = f"u{n}"
            body = {"definition": "pay", "input": {"amount": 100 + n, "ref": ref}}
            headers = {"Authorization": f"Bearer {self.key}", "Idempotency-Key": f"start-{ref}"}
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                servers = list(self.servers)
                base = servers[n % len(servers)] if servers else None
                try:
                    if base is None:
                        raise httpx.ConnectError("no server listed")
                    r = httpx.post(f"{base}/v1/runs", json=body, headers=headers, timeout=10)
                except httpx.HTTPError:
                    self.ctx.count("start answers lost (retried, same key)")
                    time.sleep(0.2)
                    n += 1  # the next try goes to the other server
                    continue
                if r.status_code in (200, 201):
                    self.acknowledged[ref] = str(r.json()["run_id"])
                    break
                self.ctx.count(f"start answered {r.status_code}")
                time.sleep(0.2)


def upgrade_under_load(ctx: Ctx) -> tuple[Verdict, float | None]:
    f = ctx.fleet
    if f.pg is None:
        raise RuntimeError("upgrade_under_load runs on PostgreSQL")
    build = old_build(OLD_COMMIT)
    url = f.pg.create_database(f"upgrade_{f.dir.name.replace('-', '_')}")
    old = _Old(ctx, build, url)
    old.cli("tenants", "create", TENANT)  # also sets the database up, at the old schema
    key = json.loads(old.cli("users", "create", "client", "--tenant", TENANT, "--roles", "operator"))[
        "api_key"
    ]
    definition = f.dir / "pay.json"
    definition.write_text(json.dumps(pay_definition(wait="300ms")))
    old.cli("--tenant", TENANT, "publish", str(definition))
    ctx.count(f"old build {build.commit[:10]} ({build.version()})")
    f.control(delay_ms=20)

    old_port = free_port()
    old_server = old.spawn("old-serve", "serve", "--port", str(old_port))
    old_url = f"http://127.0.0.1:{old_port}"
    f.wait_healthy(old_server, old_url, timeout=60)
    old_sched = old.spawn("old-s1", "scheduler", "--poll-interval", "50ms", ready="scheduler running")
    old_workers = [
        old.spawn(f"old-w{k}", "worker", "--activities", ACTIVITIES, "--worker-id", f"old-w{k}", *WORKER_ARGS,
                  ready="serving")
        for k in (1, 2)
    ]  # fmt: skip
    client = _Client(ctx, key)
    client.servers = [old_url]
    client.thread.start()
    try:
        wait_until(lambda: len(client.acknowledged) >= ctx.runs // 3, 120, "runs started on the old build")
        # The current build's schema upgrade, with the old fleet running and the client starting runs.
        done = subprocess.run(  # noqa: S603 - argv built here
            [sys.executable, "-m", "lockstep", "--db", url, "db", "upgrade"],
            env=f.env, cwd=f.dir, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"db upgrade exited {done.returncode}: {done.stderr[-2000:]}")
        ctx.count("schema upgraded under load (current build's db upgrade)")
        engine = Engine.open(url)
        try:
            return _after_upgrade(ctx, old, engine, client, old_url, old_server, old_sched, old_workers)
        finally:
            engine.close()
    finally:
        client.stop.set()
        client.thread.join(90)


def _after_upgrade(
    ctx: Ctx,
    old: _Old,
    engine: Engine,
    client: _Client,
    old_url: str,
    old_server: Proc,
    old_sched: Proc,
    old_workers: list[Proc],
) -> tuple[Verdict, float | None]:
    f = ctx.fleet
    url = old.url
    with Monitor(engine, TENANT, interval=0.2) as mon:
        new_port = free_port()
        f.serve("new-serve", new_port, db_url=url)
        new_url = f"http://127.0.0.1:{new_port}"
        f.spawn("new-s1", ["scheduler", "--poll-interval", "50ms"], db_url=url, ready="scheduler running")
        for k in (1, 2):
            f.worker(f"new-w{k}", db_url=url)
        client.servers = [old_url, new_url]
        ctx.count("old and new processes side by side")
        wait_until(lambda: len(client.acknowledged) >= 2 * ctx.runs // 3, 120, "runs started side by side")
        old_workers[0].signal(signal.SIGKILL)
        ctx.count("old worker SIGKILLed mid-flight")
        for proc in (old_workers[1], old_sched, old_server):
            proc.signal(signal.SIGTERM)
        client.servers = [new_url]
        for proc in (old_workers[1], old_sched, old_server):
            code = proc.wait(60)
            ctx.count(f"old {proc.name.removeprefix('old-')} drained on SIGTERM: exit {code}")
        refused = old.spawn(
            "old-w3", "worker", "--activities", ACTIVITIES, "--worker-id", "old-w3", *WORKER_ARGS
        )
        code = refused.wait(60)
        if code == 0 or "newer than this lockstep" not in refused.log():
            raise RuntimeError(
                f"an old worker started after the upgrade was not refused: {refused.log()[-2000:]}"
            )
        ctx.count("old worker started after the upgrade: refused (newer than this lockstep)")
        wait_until(
            lambda: len(client.acknowledged) >= ctx.runs, 120, "the last runs started on the new build"
        )
        client.stop.set()
        client.thread.join(90)
        t0 = time.monotonic()
        settled = _settle(engine, ctx.deadline_s)
    verdict = check(engine, f.ledger, Expect(tenant=TENANT), mon, refs=True)
    with engine.service.read() as tx:
        present = set(tx.run_ids(TENANT))
    for ref, run_id in client.acknowledged.items():
        if run_id not in present:
            verdict.flag("runs_lost", f"start {ref} acknowledged as {run_id}, which does not exist")
    ctx.count("runs acknowledged", len(client.acknowledged))
    return verdict, None if settled is None else round(settled - t0, 2)


def _settle(engine: Engine, deadline_s: float) -> float | None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            with engine.service.read() as tx:
                states = tx.runs(TENANT, status=None, definition=None, after="", limit=100_000)
        except Exception:
            states = None
        if states is not None and all(s.status in TERMINAL for s in states):
            return time.monotonic()
        time.sleep(0.2)
    return None
