"""`Client`: lockstep's HTTP API from Python, one method per call, typed answers, lockstep errors."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, Unpack

import httpx

from ..errors import Conflict, Gone, NotFound, RateLimited
from . import calls
from .calls import Call, RunFilters
from .config import Settings
from .problems import WaitTimedOut, unreachable
from .types import (
    CancelResult,
    DeadLetter,
    DecisionResult,
    Event,
    EventDelivery,
    InboxItem,
    Link,
    MigrationPlan,
    MigrationRequest,
    MintedLink,
    Reassigned,
    RepairResult,
    RetryResult,
    RevokedLink,
    Run,
    RunPage,
    StartResult,
    Task,
)
from .waits import Backoff, settled

__all__ = ["Client"]

T = TypeVar("T")


class Client:
    """A connection to a lockstep server (`lockstep serve`) with one tenant's API key.

    Every method raises a `lockstep.errors` class for an error answer (NotFound, Conflict, Forbidden,
    InvalidInput, RateLimited, ...) with the server's message, and `Unavailable` when the server cannot
    be reached. `allow_http` permits plain http:// to a host that is not loopback (the key then
    travels in clear text). Use it as a context manager, or call `close()`. Thread-safe (one connection pool).
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        api_key_file: str | Path | None = None,
        timeout: float = 30.0,
        headers: dict[str, str] | None = None,
        allow_http: bool = False,
        transport: httpx.BaseTransport | None = None,
        busy_wait: float = 60.0,
    ) -> None:
        self.settings = Settings(url, api_key, api_key_file, headers, allow_http)
        # A server whose workers' queue is full answers 429 `backlog_full` with Retry-After (nothing was
        # done): calls wait that long and try again, for at most `busy_wait` seconds in all (0: never).
        self.busy_wait = busy_wait
        self.url = self.settings.url
        self._http = httpx.Client(
            base_url=self.url, headers=self.settings.headers, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.close()

    def send(self, call: Call[T], *, timeout: float | None = None) -> T:
        """Send one call (from `lockstep.client.calls`) and decode its answer; a 429 `backlog_full` is
        tried again after its Retry-After, within `busy_wait` seconds."""
        deadline = time.monotonic() + self.busy_wait
        while True:
            try:
                return self._send_once(call, timeout)
            except RateLimited as exc:
                wait = max(0.05, exc.retry_after)
                if exc.code != "backlog_full" or time.monotonic() + wait > deadline:
                    raise
                time.sleep(wait)

    def _send_once(self, call: Call[T], timeout: float | None) -> T:
        kwargs = self.settings.request(call)
        if timeout is not None:
            kwargs["timeout"] = timeout
        try:
            response = self._http.request(call.method, call.path, **kwargs)
        except httpx.TransportError as exc:  # no answer: refused, reset, timed out, TLS
            raise unreachable(f"{call.method} {self.url}{call.path}", exc) from None
        return self.settings.answer(call, response)

    # --- runs --------------------------------------------------------------------------------------
    def start(
        self,
        definition: str,
        input: Any = None,
        *,
        key: str | None = None,
        version: int | None = None,
        traceparent: str | None = None,
    ) -> StartResult:
        """Start a run of `definition` (its latest version, or `version`). `key` is the start key
        (sent as Idempotency-Key): the same key returns the same run, with `created=False`."""
        return self.send(calls.start(definition, input, key, version, traceparent))

    def get(self, run_id: str, *, reveal: bool = False) -> Run:
        """One run; `reveal` shows sensitive values (needs the read_sensitive grant; audited)."""
        return self.send(calls.get(run_id, reveal))

    def runs_page(
        self,
        *,
        limit: int = 50,
        cursor: str | None = None,
        **filters: Unpack[RunFilters],
    ) -> RunPage:
        """One page of runs, newest first; pass its `next_cursor` as `cursor` for the next one.

        The filters are the UI's runs search, `calls.RunFilters` (each absent or None: any), e.g.
        `status="waiting"`, `run="8f3a"`, `input="customer = ACME"`. A bad filter value raises
        InvalidInput with the server's message, an unknown filter name TypeError."""
        return self.send(calls.page(filters, limit, cursor))

    def list_runs(
        self,
        *,
        page_size: int = 50,
        limit: int | None = None,
        **filters: Unpack[RunFilters],
    ) -> Iterator[Run]:
        """Every run that matches (at most `limit`), newest first, fetched a page at a time (the filters
        are runs_page's)."""
        cursor: str | None = None
        seen = 0
        while True:
            page = self.send(calls.page(filters, page_size, cursor))
            for run_ in page.items:
                if limit is not None and seen >= limit:
                    return
                seen += 1
                yield run_
            if page.next_cursor is None or not page.items or page.next_cursor == cursor:
                return
            cursor = page.next_cursor

    def wait(
        self,
        run_id: str,
        *,
        timeout: float = 60.0,
        until: Callable[[Run], bool] = settled,
        max_interval: float = 2.0,
    ) -> Run:
        """The run once `until(run)` holds (default: it ended, or it waits for a person, an external
        event or an operator), polling at growing intervals up to `max_interval` seconds. Raises
        WaitTimedOut after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        backoff = Backoff(most=max_interval)
        while True:
            run = self.get(run_id)
            if until(run):
                return run
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimedOut(
                    f"run {run_id} is still {run.status} ({run.wait_reason or run.wait_kind or 'busy'}) "
                    f"after {timeout:g}s"
                )
            time.sleep(backoff.delay(left))

    def cancel(self, run_id: str, reason: str) -> CancelResult:
        """Cancel a run (Conflict if it finished already)."""
        return self.send(calls.cancel(run_id, reason))

    def events(
        self, run_id: str, *, after_seq: int = 0, page_size: int = 200, reveal: bool = False
    ) -> Iterator[Event]:
        """The run's history from the event after `after_seq` on, a page at a time."""
        while True:
            page = self.send(calls.events(run_id, after_seq, page_size, reveal))
            if not page or page[-1].seq <= after_seq:  # the end (or a server that ignored after_seq)
                return
            yield from page
            after_seq = page[-1].seq

    # --- repair (role operator) --------------------------------------------------------------------
    def retry(self, run_id: str, step: str, reason: str, *, new_key: bool = False) -> RetryResult:
        """Run a step that waits for an operator (dead letter, unknown outcome) again."""
        return self.send(calls.retry(run_id, step, reason, new_key))

    def pause(self, run_id: str, reason: str) -> RepairResult:
        return self.send(calls.repair(run_id, "pause", {"reason": reason}))

    def resume(self, run_id: str, reason: str) -> RepairResult:
        return self.send(calls.repair(run_id, "resume", {"reason": reason}))

    def skip(self, run_id: str, step: str, reason: str, *, output: Any = None) -> RepairResult:
        """Skip the current step where the definition allows it; `output` stands in for its output."""
        body = {"step": step, "reason": reason, "output": output}
        return self.send(calls.repair(run_id, "skip", body))

    def edit_input(self, run_id: str, input: Any, reason: str) -> RepairResult:
        return self.send(calls.repair(run_id, "edit-input", {"input": input, "reason": reason}))

    def resolve(
        self, run_id: str, step: str, outcome: str, reason: str, *, output: Any = None
    ) -> RepairResult:
        """Settle a step whose outcome was unknown, as "succeeded" or "failed"."""
        body = {"step": step, "as": outcome, "reason": reason, "output": output}
        return self.send(calls.repair(run_id, "resolve", body))

    def migrate(
        self,
        run_id: str,
        to_version: int,
        reason: str,
        *,
        mapping: dict[str, str] | None = None,
        dry_run: bool = False,
    ) -> MigrationPlan:
        """Move a run to another version (`dry_run`: only the plan); `ok` False with `problems` when it
        is refused, `proposal` or `request` when it waits for a second operator or for approvers."""
        return self.send(calls.migrate(run_id, to_version, reason, mapping, dry_run))

    def confirm(self, run_id: str, proposal_id: str, reason: str) -> RepairResult:
        """Four-eyes: confirm another operator's proposal (it runs now)."""
        return self.send(calls.proposal(run_id, proposal_id, "confirm", reason))

    def reject(self, run_id: str, proposal_id: str, reason: str) -> RepairResult:
        return self.send(calls.proposal(run_id, proposal_id, "reject", reason))

    def dead_letters(self) -> list[DeadLetter]:
        """Runs whose task went to the dead-letter state, with the reason (retry the step)."""
        return self.send(calls.dead_letters())

    def migration_requests(self, *, status: str | None = None, limit: int = 100) -> list[MigrationRequest]:
        """The tenant's migrations that need approval, newest first (role operator)."""
        return self.send(calls.migration_requests(status, limit))

    def migration_request(self, request_id: str) -> MigrationRequest:
        """One migration request: its runs (and each one's outcome), approvers and decisions."""
        return self.send(calls.migration_request(request_id))

    # --- approvals and external events -------------------------------------------------------------
    def mint_link(
        self, run_id: str, step: str, approver: str, *, expires_in: str | None = None
    ) -> MintedLink:
        """A fresh single-use approval link for `approver` (its token is shown this once)."""
        return self.send(calls.mint_link(run_id, step, approver, expires_in))

    def links(self, run_id: str) -> list[Link]:
        """The links of the run's pending approval request (never their tokens)."""
        return self.send(calls.links(run_id))

    def revoke_link(self, link_id: str, reason: str) -> RevokedLink:
        return self.send(calls.revoke_link(link_id, reason))

    def reassign(self, run_id: str, step: str, old: str, new: str, reason: str) -> Reassigned:
        """Replace approver `old` by `new` on the step's pending request (old's links are revoked)."""
        return self.send(calls.reassign(run_id, step, old, new, reason))

    def inbox(self) -> list[InboxItem]:
        """The pending approval requests the caller may decide."""
        return self.send(calls.inbox())

    def decide(
        self,
        request_id: str,
        decision: str,
        *,
        comment: str | None = None,
        values: dict[str, Any] | None = None,
    ) -> DecisionResult | MigrationRequest:
        """Approve or reject request `request_id` (from the inbox) with the caller's own key; the answer
        is the request's state, or for a migration request (kind `migration`) the migration request."""
        return self.send(calls.decide(request_id, decision, comment, values))

    def publish_event(self, name: str, key: str, event_id: str, payload: Any = None) -> EventDelivery:
        """Send an external event (a publisher's key); a resend of `event_id` gets the first answer."""
        return self.send(calls.publish_event(name, key, event_id, payload))

    # --- the task API (workers) --------------------------------------------------------------------
    def poll_tasks(
        self,
        activities: Sequence[str],
        *,
        max_tasks: int = 1,
        wait_seconds: float = 20.0,
        lease_seconds: float = 30.0,
        worker_id: str | None = None,
        queue: str | None = None,
        versions: Sequence[str] | None = None,
    ) -> list[Task]:
        """Long-poll: up to `max_tasks` tasks leased for `lease_seconds`, or none after `wait_seconds`."""
        call = calls.poll(activities, max_tasks, wait_seconds, lease_seconds, worker_id, queue, versions)
        return self.send(call, timeout=wait_seconds + 30.0)

    def abandon_leases(self, worker_id: str) -> int:
        """Give up the leases a dead earlier worker under `worker_id` held (at start-up): how many."""
        return self.send(calls.abandon(worker_id))

    def heartbeat(self, task_id: str, fencing_token: int, lease_seconds: float = 30.0) -> bool:
        """Extend a lease; False when it is no longer held (stop working on the task)."""
        try:
            self.send(calls.heartbeat(task_id, fencing_token, lease_seconds))
        except (Conflict, NotFound, Gone):
            return False
        return True

    def complete_task(self, task_id: str, attempt: int, fencing_token: int, output: Any) -> None:
        """Report success. Conflict (code stale_result) when the lease was superseded: nothing changed."""
        self.send(calls.complete(task_id, attempt, fencing_token, output))

    def fail_task(
        self,
        task_id: str,
        attempt: int,
        fencing_token: int,
        code: str,
        message: str = "",
        *,
        retryable: bool = True,
    ) -> None:
        """Report failure (retried per the step's policy unless `retryable` is False)."""
        self.send(calls.fail(task_id, attempt, fencing_token, code, message, retryable))
