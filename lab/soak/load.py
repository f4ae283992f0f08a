"""The soak's steady load, over the HTTP API as a tenant's services would drive it: a paced client that
starts runs of three processes on either server (each start with its own Idempotency-Key, retried with
the same key through 429s, 503s, lost answers and dead servers), and a population of approvers who
poll their inbox and decide (mostly approve, sometimes reject, racing each other for the same request).

What the client was told is kept: every start the server acknowledged must exist at the end, exactly
once (the checker's `starts_duplicated` and the soak's `starts_lost`).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from lockstep.client import Client
from lockstep.errors import Conflict, Gone, LockstepError, NotFound, RateLimited, Unavailable

from ..faults.base import pay_definition

__all__ = ["DEFINITIONS", "Load", "definitions"]

# Which process each start runs, and how often.
DEFINITIONS = {"pay": 0.5, "pay-parallel": 0.25, "pay-approved": 0.25}
START_DEADLINE_S = 180.0  # one start keeps retrying (same key) this long at most


def definitions() -> list[dict[str, Any]]:
    """The three processes: effects with compensation and a timer; the same with a parallel step; and
    with an approval by one of three approvers between the charge and the timer."""
    approve = {
        "id": "approve",
        "approval": {
            "approvers": {"users": ["alice", "bob", "carol"]},
            "quorum": 1,
            "timeout": "1h",
            "details": "Pay ${input.amount} for ${input.ref}",
        },
    }
    return [
        pay_definition("pay", wait="2s"),
        pay_definition("pay-parallel", wait="1s", parallel=True),
        pay_definition("pay-approved", wait="100ms", extra=[approve]),
    ]


@dataclass
class Load:
    urls: list[str]
    client_key: str
    approver_keys: dict[str, str]
    rate: float  # starts per second
    rng: random.Random
    counts: Counter[str] = field(default_factory=Counter)
    acknowledged: dict[str, str] = field(default_factory=dict)  # start key -> run id
    start_latency_ms: list[float] = field(default_factory=list)
    server_errors: list[str] = field(default_factory=list)  # a few examples of 5xx other than 503
    server_error_count: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop_starts: threading.Event = field(default_factory=threading.Event)
    _stop_all: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def count(self, what: str, n: int = 1) -> None:
        with self._lock:
            self.counts[what] += n

    def start(self) -> None:
        self._spawn(self._pace, "soak-pacer")
        for name, key in self.approver_keys.items():
            self._spawn(lambda name=name, key=key: self._approve(name, key), f"soak-approver-{name}")

    def _spawn(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop_starting(self) -> None:
        """No new starts; the ones in flight finish their retries. The approvers go on deciding."""
        self._stop_starts.set()

    def stop(self) -> None:
        self._stop_starts.set()
        self._stop_all.set()
        for thread in self._threads:
            thread.join(START_DEADLINE_S + 10)

    # --- starts -------------------------------------------------------------------------------------
    def _pace(self) -> None:
        """Start one run every 1/rate seconds, each in its own thread (a start may be retrying for a
        while through an outage; the pace does not wait for it), at most 64 in flight."""
        clients = [Client(url, api_key=self.client_key, timeout=10) for url in self.urls]
        in_flight = threading.BoundedSemaphore(64)
        n = 0
        next_at = time.monotonic()
        try:
            while not self._stop_starts.is_set():
                next_at += 1.0 / self.rate
                delay = next_at - time.monotonic()
                if delay > 0 and self._stop_starts.wait(delay):
                    break
                if not in_flight.acquire(timeout=5):
                    self.count("starts skipped: 64 already retrying")
                    continue
                n += 1
                name = self.rng.choices(list(DEFINITIONS), weights=list(DEFINITIONS.values()))[0]
                first = n % len(clients)
                args = (clients, first, name, n, in_flight)
                threading.Thread(target=self._one_start, args=args, daemon=True).start()
            deadline = time.monotonic() + START_DEADLINE_S + 5
            for _ in range(64):  # wait for the starts still retrying: all 64 permits back
                if not in_flight.acquire(timeout=max(0.0, deadline - time.monotonic())):
                    break
        finally:
            for c in clients:
                c.close()

    def _one_start(
        self, clients: list[Client], first: int, name: str, n: int, in_flight: threading.BoundedSemaphore
    ) -> None:
        key = f"soak-{n}"
        payload = {"amount": 100 + n % 900, "ref": key}
        deadline = time.monotonic() + START_DEADLINE_S
        turn = first
        t0 = time.monotonic()
        try:
            while time.monotonic() < deadline and not self._stop_all.is_set():
                client = clients[turn % len(clients)]
                try:
                    started = client.start(name, payload, key=key)
                except RateLimited as exc:
                    self.count("start answered 429 (retried after Retry-After)")
                    time.sleep(min(max(exc.retry_after or 1.0, 0.1), 2.0))
                    continue
                except Unavailable as exc:
                    self._unavailable(exc)
                    turn += 1
                    time.sleep(0.2)
                    continue
                except LockstepError as exc:
                    self.count(f"start refused: {exc.code}")
                    return
                with self._lock:
                    self.acknowledged[key] = started.run_id
                    self.start_latency_ms.append((time.monotonic() - t0) * 1000)
                    self.counts["starts acknowledged"] += 1
                return
            self.count("starts given up after retrying 180 s")
        finally:
            in_flight.release()

    def _unavailable(self, exc: Unavailable) -> None:
        """No answer or 503 is the outage the client rides out; any other 5xx is a server error."""
        status = (getattr(exc, "extra", None) or {}).get("status")
        if status in (None, 503):
            self.count("start unanswered or 503 (retried, same key, other server)")
            return
        self.count(f"start answered {status}")
        with self._lock:
            if len(self.server_errors) < 5:
                self.server_errors.append(str(exc)[:300])
            self.server_error_count += 1

    # --- approvers ----------------------------------------------------------------------------------
    def _approve(self, name: str, key: str) -> None:
        """Poll the inbox every 0.5-2 s; decide each request (approve 9 in 10) unless another approver
        got there first (409 and 404 are the race, counted)."""
        rng = random.Random(f"{self.rng.random()}/{name}")  # noqa: S311 - a seeded population, not secrets
        clients = [Client(url, api_key=key, timeout=10) for url in self.urls]
        turn = 0
        try:
            while not self._stop_all.wait(rng.uniform(0.5, 2.0)):
                client = clients[turn % len(clients)]
                try:
                    items = client.inbox()
                except LockstepError:
                    turn += 1
                    continue
                for item in items[:20]:
                    choice = "approve" if rng.random() < 0.9 else "reject"
                    try:
                        client.decide(item.request_id, choice, comment=f"{name} (soak)")
                        self.count(f"approvals decided: {choice}")
                    except (Conflict, NotFound, Gone):
                        self.count("approval raced: another approver decided first")
                    except LockstepError as exc:
                        self.count(f"approval refused: {exc.code}")
        finally:
            for c in clients:
                c.close()
