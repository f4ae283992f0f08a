"""Backpressure: starts are refused (RateLimited: 429 with Retry-After) while the activity tasks waiting
for a worker reach the server limits max_tenant_backlog (the starting tenant's) or max_backlog (all).

Counting the ready tasks on every start would put a scan of the queue on the hot path, and a counter
row maintained by every task insert and claim would be one row every writer contends for. Instead each
process counts the ready tasks per tenant (one GROUP BY over their partial index) at most once every
backlog_refresh_ms, on the thread of the start that found the count stale while the others go on with
it, and adds the starts it admitted since. The trade-off: other processes' starts within one interval
are not seen, so the backlog can overshoot by what the other servers admit in that interval; it never
grows without bound, and a start costs no query at all in between.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter

from ..errors import RateLimited
from ..store import WorkTx
from .port import KernelPort

__all__ = ["Backlog"]

# Bounds of the Retry-After a refused start is given: at least one refresh, at most half a minute.
MIN_RETRY_S = 1.0
MAX_RETRY_S = 30.0


class Backlog:
    def __init__(self, kernel: KernelPort[WorkTx]) -> None:
        self.kernel = kernel
        limits = kernel.server_limits
        self.tenant_cap = limits["max_tenant_backlog"]
        self.total_cap = limits["max_backlog"]
        self.refresh_s = limits["backlog_refresh_ms"] / 1000
        self._lock = threading.Lock()
        self._counting = threading.Lock()
        self._counts: dict[str, int] = {}
        self._admitted: Counter[str] = Counter()
        self._total = 0  # the sum of both, kept: a start costs no walk over the tenants
        self._at = -math.inf
        self._drain_per_s = 0.0  # ready tasks taken per second, from the last two counts

    def admit(self, tenant: str, n: int = 1) -> None:
        """Refuse `n` starts of `tenant` while its backlog or the total is at its limit; else count them."""
        if time.monotonic() - self._at >= self.refresh_s:
            self._refresh()
        with self._lock:
            mine = self._counts.get(tenant, 0) + self._admitted[tenant]
            total = self._total
            if mine + n > self.tenant_cap:
                raise self._refusal(
                    f"tenant {tenant} has {mine} activity tasks waiting for a worker, its limit "
                    f"(max_tenant_backlog={self.tenant_cap})",
                    mine + n - self.tenant_cap,
                )
            if total + n > self.total_cap:
                raise self._refusal(
                    f"the server has {total} activity tasks waiting for a worker, its limit "
                    f"(max_backlog={self.total_cap})",
                    total + n - self.total_cap,
                )
            self._admitted[tenant] += n
            self._total += n

    def _refusal(self, what: str, over: int) -> RateLimited:
        wait = over / self._drain_per_s if self._drain_per_s > 0 else MAX_RETRY_S / 4
        wait = min(MAX_RETRY_S, max(MIN_RETRY_S, self.refresh_s, wait))
        return RateLimited(
            f"{what}; start again after Retry-After seconds, when workers have taken some",
            retry_after=wait,
            code="backlog_full",
        )

    def _refresh(self) -> None:
        first = self._at == -math.inf
        # One counter at a time; the others go on with the last count (the first start waits for it).
        if not self._counting.acquire(blocking=first):
            return
        try:
            if time.monotonic() - self._at < self.refresh_s:
                return  # another thread counted while this one waited
            with self.kernel.read() as tx:
                counts = tx.ready_backlog()
            now = time.monotonic()
            with self._lock:
                counted = sum(counts.values())
                if not first and now > self._at:
                    self._drain_per_s = max(0.0, (self._total - counted) / (now - self._at))
                self._counts, self._admitted, self._at, self._total = counts, Counter(), now, counted
        finally:
            self._counting.release()
