"""What the client returns: one frozen msgspec Struct per thing the API answers with.

Why msgspec Structs (not dataclasses or TypedDicts): the JSON of an answer is decoded and checked
against these types in one pass (an answer that does not fit is a clear error at the call, not a
KeyError later), attribute access is typed for mypy and editors, and unknown fields are ignored, so a
client keeps working against a newer server that adds fields. msgspec is a dependency of lockstep
already (the core's event records). Values that the tenant's definition shapes (inputs, outputs,
payloads) are JSON (`Any`); recorded details (an error, a decision) are plain dicts as the API sends
them, or a marker string where the server redacts a sensitive value.

`msgspec.to_builtins(value)` gives any of them back as plain JSON.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "TERMINAL",
    "CancelResult",
    "DeadLetter",
    "DecisionResult",
    "DefinitionRef",
    "Event",
    "EventDelivery",
    "InboxItem",
    "Lane",
    "Link",
    "MigrationPlan",
    "MigrationRequest",
    "MintedLink",
    "Reassigned",
    "RepairResult",
    "RetryResult",
    "RevokedLink",
    "Run",
    "RunPage",
    "StartResult",
    "Step",
    "Task",
]

# The statuses after which a run never changes again.
TERMINAL = frozenset({"completed", "failed", "cancelled"})


class _Record(msgspec.Struct, frozen=True, kw_only=True):
    """Frozen, keyword-only; unknown fields of a newer server are ignored."""


class DefinitionRef(_Record, frozen=True, kw_only=True):
    name: str
    version: int
    digest: str = ""


class Step(_Record, frozen=True, kw_only=True):
    """One step of a run, as far as it got (`status`: pending, running, succeeded, failed, ...)."""

    status: str
    attempts: int = 0
    output: Any = None
    error: Any = None
    idempotency_key: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    kind: str | None = None
    duration_seconds: float | None = None
    compensation: Any = None


class Lane(_Record, frozen=True, kw_only=True):
    """A branch of a parallel step or an item of a for-each step."""

    step: str
    kind: str
    name: str
    status: str
    current_step: str | None = None
    output: Any = None
    error: Any = None
    started_at: str | None = None
    finished_at: str | None = None


class Run(_Record, frozen=True, kw_only=True):
    """A run as `GET /v1/runs/{id}` (and `lockstep show`) shows it."""

    run_id: str
    tenant: str
    status: str
    definition: DefinitionRef
    current_step: str | None = None
    wait_kind: str | None = None
    wait_reason: str | None = None
    waiting_since: str | None = None
    waiting_until: str | None = None
    next_action: str | None = None
    input: Any = None
    output: Any = None
    error: Any = None
    steps: dict[str, Step] = msgspec.field(default_factory=dict)
    lanes: dict[str, Lane] = msgspec.field(default_factory=dict)
    parent: Any = None
    children: dict[str, Any] = msgspec.field(default_factory=dict)
    event_waits: dict[str, Any] = msgspec.field(default_factory=dict)
    started_at: str = ""
    updated_at: str = ""
    finished_at: str | None = None
    cancel: Any = None
    attention: Any = None
    seq: int = 0
    start_key: str | None = None
    ignored_results: int = 0

    @property
    def terminal(self) -> bool:
        """Whether the run ended (completed, failed or cancelled): it never changes again."""
        return self.status in TERMINAL


class RunPage(_Record, frozen=True, kw_only=True):
    """One page of `GET /v1/runs`, newest first; `next_cursor` asks for the next (older) page."""

    items: list[Run]
    next_cursor: str | None = None


class StartResult(_Record, frozen=True, kw_only=True):
    run_id: str
    created: bool = True  # False: the start key returned an existing run


class CancelResult(_Record, frozen=True, kw_only=True):
    run_id: str
    status: str
    accepted: bool = True  # False: the run was already cancelling


class RetryResult(_Record, frozen=True, kw_only=True):
    run_id: str
    step: str
    status: str
    attempt: int


class RepairResult(_Record, frozen=True, kw_only=True):
    """What an operator command did: the types of the events it recorded, or its four-eyes proposal."""

    run_id: str
    status: str
    events: list[str] = msgspec.field(default_factory=list)
    proposal: Any = None


class Event(_Record, frozen=True, kw_only=True):
    """One event of a run's history (`data` is a marker string where a value is redacted)."""

    seq: int
    type: str
    at: str
    step: str | None = None
    attempt: int | None = None
    data: Any = None


class InboxItem(_Record, frozen=True, kw_only=True):
    """A pending approval request the caller may decide (decide it by `request_id`)."""

    request_id: str
    run_id: str
    step: str
    definition: DefinitionRef
    details: Any = None
    quorum: int = 1
    decisions: list[Any] = msgspec.field(default_factory=list)
    requested_at: str = ""
    expires_at: str = ""
    form: list[dict[str, Any]] | None = None
    kind: str = "approval"  # or "migration": a migration that needs approval (`migration` says which)
    migration: dict[str, Any] | None = None


class DecisionResult(_Record, frozen=True, kw_only=True):
    request_id: str
    run_id: str
    step: str
    decision: str
    run_status: str
    link_id: str | None = None
    request_status: str | None = None
    decisions: list[Any] = msgspec.field(default_factory=list)


class EventDelivery(_Record, frozen=True, kw_only=True):
    """What `POST /v1/events` did: delivered to runs, or buffered for the first one that waits."""

    event_id: str
    name: str
    key: str
    status: str
    delivered_to: list[str] = msgspec.field(default_factory=list)
    buffered_until: str | None = None
    replay: bool = False


class Task(_Record, frozen=True, kw_only=True):
    """A task leased to a worker over HTTP: run the activity, then report with `fencing_token`."""

    task_id: str
    run_id: str
    step: str
    attempt: int
    kind: str
    activity: str
    idempotency_key: str
    definition: str
    version: int
    fencing_token: int
    input: Any = None
    delivery: str = ""
    deadline: str = ""
    tenant: str = ""
    traceparent: str = ""


class MigrationPlan(_Record, frozen=True, kw_only=True):
    """What moving a run to another version does (`dry_run`) or did (`status`, `events`), or the
    four-eyes `proposal` or approval `request` it waits for; `problems` say why it is refused (`ok`
    False). The fields only some answers carry are UNSET when absent."""

    run_id: str
    ok: bool
    dry_run: bool
    from_: DefinitionRef = msgspec.field(name="from")
    to: Any = None
    mapping: dict[str, str] = msgspec.field(default_factory=dict)
    steps_added: list[str] = msgspec.field(default_factory=list)
    steps_removed: list[str] = msgspec.field(default_factory=list)
    current_step: Any = None
    carried: list[str] = msgspec.field(default_factory=list)
    restart: str | None = None
    problems: list[str] = msgspec.field(default_factory=list)
    status: str | msgspec.UnsetType = msgspec.UNSET
    events: list[str] | msgspec.UnsetType = msgspec.UNSET
    proposal: Any | msgspec.UnsetType = msgspec.UNSET
    request: MigrationRequest | msgspec.UnsetType = msgspec.UNSET


class MigrationRequest(_Record, frozen=True, kw_only=True):
    """A migration that waits for (or got) its approvers' decision (`GET /v1/migrations/{id}`)."""

    request_id: str
    status: str
    definition: str
    from_version: int
    to_version: int
    mapping: dict[str, str] = msgspec.field(default_factory=dict)
    reason: str = ""
    requested_by: str = ""
    bulk: bool = False
    approvers: dict[str, Any] = msgspec.field(default_factory=dict)
    created_at: str = ""
    expires_at: str = ""
    decided_at: str | None = None
    applied_at: str | None = None
    decisions: list[dict[str, Any]] = msgspec.field(default_factory=list)
    runs: list[dict[str, Any]] = msgspec.field(default_factory=list)


class DeadLetter(_Record, frozen=True, kw_only=True):
    """A run waiting in the dead-letter state: no worker took its task in time (retry the step)."""

    run_id: str
    step: str
    reason: str
    since: str
    definition: DefinitionRef


class MintedLink(_Record, frozen=True, kw_only=True):
    """A fresh single-use approval link; the token is shown this once."""

    url: str
    token: str
    link_id: str
    expires_at: str
    approver: str
    request_id: str


class Link(_Record, frozen=True, kw_only=True):
    """An approval link as stored (never its token); `expires_at` in milliseconds since the epoch."""

    link_id: str
    tenant: str
    run_id: str
    step: str
    request_id: str
    approver: str
    status: str
    expires_at: int
    created_at: str
    used_at: str | None = None
    decision: str | None = None


class RevokedLink(_Record, frozen=True, kw_only=True):
    link_id: str
    status: str


class Reassigned(_Record, frozen=True, kw_only=True):
    run_id: str
    step: str
    request_id: str
    old: str
    new: str
