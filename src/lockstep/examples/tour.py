"""`lockstep demo`: a scripted tour on a fresh database, with a real worker process that really dies.

It publishes the example process, starts a worker subprocess, and runs four orders: one whose
inventory call fails twice, one whose worker is SIGKILLed right after charging the card (the response is
lost), one that waits on a durable timer, and one cancelled while waiting (its charge is refunded and its
reservation released, in reverse order). Then it checks the payment ledger and replays every history.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from importlib import resources
from subprocess import DEVNULL

from rich.console import Console

from ..core.narrate import narrate
from ..core.timeutil import parse_iso
from ..engine import Engine
from .activities import LEDGER_ENV

__all__ = ["run_tour"]

SCENARIOS = [
    (
        "flaky inventory",
        "the inventory service fails twice; retries back off on durable timers",
        {"order_id": "A-100", "sku": "lamp", "qty": 1, "amount": 30.0, "fail_times": 2},
    ),
    (
        "lost response",
        "the worker is SIGKILLed after the card was charged, before it could report",
        {"order_id": "B-200", "sku": "desk", "qty": 2, "amount": 250.0, "lose_response": True},
    ),
    (
        "cooling-off timer",
        "a big order waits 2s on a durable timer before shipping",
        {"order_id": "C-300", "sku": "chair", "qty": 12, "amount": 900.0},
    ),
    (
        "cancellation",
        "a big order is cancelled during its cooling-off: refund, then release",
        {"order_id": "D-400", "sku": "sofa", "qty": 20, "amount": 2400.0},
    ),
]


class _Supervisor:
    """Keeps one worker process alive, like systemd or Kubernetes would, and reports its deaths."""

    def __init__(self, db: str, ledger: str, console: Console) -> None:
        self.cmd = [
            sys.executable,
            "-m",
            "lockstep",
            "--db",
            db,
            "worker",
            "--activities",
            "lockstep.examples.activities",
            "--lease-ttl",
            "1s",
            "--poll-interval",
            "50ms",
            "--concurrency",
            "4",
        ]
        self.env = {**os.environ, LEDGER_ENV: ledger}
        self.console = console
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.deaths: list[str] = []
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _spawn(self) -> None:
        # our own CLI with fixed arguments, not user input
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=DEVNULL, stderr=DEVNULL)  # noqa: S603

    def start(self) -> None:
        self._spawn()
        self.thread.start()

    def _loop(self) -> None:
        while not self.stopping:
            proc = self.proc
            if proc is not None and proc.poll() is not None and not self.stopping:
                how = (
                    f"killed by {signal.Signals(-proc.returncode).name}"
                    if proc.returncode < 0
                    else f"exited with {proc.returncode}"
                )
                self.deaths.append(how)
                self.console.print(
                    f"  [red]! worker pid {proc.pid} {how}[/red] -> starting a new worker process"
                )
                self._spawn()
            time.sleep(0.05)

    def stop(self) -> None:
        self.stopping = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.thread.join(2)


def _story(engine: Engine, run_id: str, console: Console) -> None:
    events = engine.events(run_id)
    t0 = parse_iso(events[0]["at"])
    for e in events:
        dt = (parse_iso(e["at"]) - t0).total_seconds()
        style = {
            "ResultIgnored": "yellow",
            "NeedsAttention": "magenta",
            "RunFailed": "red",
            "ActivityFailed": "red",
            "ActivityTimedOut": "red",
            "RunCompleted": "green",
            "RunCancelled": "yellow",
        }.get(e["type"], "")
        text = narrate(e["type"], e["data"], e["at"])
        line = f"    +{dt:6.2f}s  {e['seq']:>2} {e['type']:<22} {text}"
        console.print(f"[{style}]{line}[/{style}]" if style else line, markup=True, highlight=False)


def _ledger_rows(ledger: str) -> list[tuple[str, str, int]]:
    conn = sqlite3.connect(ledger)
    try:
        return conn.execute(
            "SELECT kind, idempotency_key, COUNT(*) FROM calls GROUP BY kind, idempotency_key "
            "ORDER BY MIN(id)"
        ).fetchall()
    finally:
        conn.close()


def _effects(ledger: str) -> dict[str, int]:
    conn = sqlite3.connect(ledger)
    try:
        return dict(conn.execute("SELECT kind, COUNT(*) FROM effects GROUP BY kind").fetchall())
    finally:
        conn.close()


def run_tour(db_url: str | None, *, keep: bool = False, console: Console | None = None) -> int:
    console = console or Console()
    tmp = tempfile.mkdtemp(prefix="lockstep-demo-")
    db = db_url or f"sqlite:///{tmp}/demo.db"
    ledger = os.path.join(tmp, "payments-ledger.db")
    console.print("[bold]lockstep demo[/bold]: a durable workflow engine on embedded SQLite")
    console.print(f"database: {db}\npayment ledger (the downstream service): {ledger}\n")
    engine = Engine.open(db)
    sup = _Supervisor(db, ledger, console)
    ok = True
    try:
        text = resources.files("lockstep.examples").joinpath("order-fulfilment.yaml").read_text()
        pub = engine.publish(text)
        console.print(
            f"published [bold]{pub['name']}[/bold] v{pub['version']} ({pub['digest'][:19]}...): "
            "reserve -> charge -> route -> cooling-off (qty > 10) -> ship\n"
        )
        sup.start()
        console.print("started a worker process (lease 1s, renewed while an activity runs)\n")
        runs: list[tuple[str, str, str]] = []
        for title, why, payload in SCENARIOS:
            run_id = engine.start("order-fulfilment", input=payload, key=f"demo-{payload['order_id']}")
            runs.append((title, why, run_id))
            console.print(f"started run {run_id}: [bold]{title}[/bold]")
        cancel_id = runs[3][2]
        deadline = time.monotonic() + 30
        while engine.show(cancel_id)["current_step"] != "cooling-off" and time.monotonic() < deadline:
            time.sleep(0.02)
        shown = engine.show(cancel_id)
        console.print(f"\nrun {cancel_id} is [cyan]{shown['status']}[/cyan]: {shown['wait_reason']}")
        console.print('cancelling it: `lockstep cancel RUN --reason "customer changed their mind"`')
        engine.cancel(cancel_id, reason="customer changed their mind", actor="demo")
        console.print()
        for title, why, run_id in runs:
            s = engine.wait_for(run_id, timeout=60)
            style = {"completed": "green", "cancelled": "yellow"}.get(s["status"], "red")
            console.print(f"[bold]{title}[/bold] ({why})")
            console.print(
                f"  run {run_id}: [{style}]{s['status']}[/{style}]"
                + (f", output {s['output']}" if s["output"] else "")
            )
            _story(engine, run_id, console)
            console.print()
        expected = {"completed", "cancelled"}
        statuses = [engine.show(r)["status"] for _, _, r in runs]
        ok = statuses == ["completed", "completed", "completed", "cancelled"]
        console.print("[bold]payment ledger[/bold] (calls per idempotency key -> effects applied once):")
        for kind, key, n in _ledger_rows(ledger):
            console.print(f"  {kind:<8} {key:<48} called {n}x")
        effects = _effects(ledger)
        console.print(
            f"  effects applied: {effects}; the lost-response charge was retried with the same key "
            "and the ledger returned the saved charge: the card was charged once."
        )
        ok = ok and effects.get("charge") == 4 and effects.get("refund") == 1 and bool(expected)
        report = engine.verify()
        bad = [r for r in report if not r["ok"]]
        console.print(
            f"\n[bold]lockstep verify[/bold]: replayed {len(report)} runs "
            f"({sum(r['events'] for r in report)} events): snapshots equal the fold of their events, "
            f"sequences contiguous, hash chains intact: "
            + ("[green]yes[/green]" if not bad else f"[red]NO: {bad}[/red]")
        )
        ok = ok and not bad
        console.print(f"worker deaths observed: {len(sup.deaths)} ({', '.join(sup.deaths) or 'none'})")
        console.print(
            "\n"
            + (
                "[green]demo finished: every run reached the state it should.[/green]"
                if ok
                else "[red]demo finished with unexpected outcomes (see above).[/red]"
            )
        )
        if keep or db_url is not None:
            console.print(f"explore: lockstep --db {db} runs   |   lockstep --db {db} show RUN")
    finally:
        sup.stop()
        engine.close()
        if not keep and db_url is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1
