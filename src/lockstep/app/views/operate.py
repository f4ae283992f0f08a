"""The views of publishing (a published version, the list, one document) and of operator repair (a
command's answer, a migration's plan, a bulk migration's report)."""

from __future__ import annotations

from pydantic import MISSING, ConfigDict, Field

from ...core.canonical import JSONObject
from .base import Recorded, View
from .migrations import MigrationRequestView
from .recorded import Proposal, StepChange, VersionRef
from .runs import DefinitionRef, RunStatus

__all__ = [
    "BulkMigration",
    "DefinitionDocument",
    "DefinitionVersion",
    "MigrationOutcome",
    "MigrationPlan",
    "PublishResult",
    "PublishWarning",
    "RepairResult",
]


class PublishWarning(View):
    """Something publishing accepted but the author should know (docs/definitions.md, "Checks")."""

    path: str = Field(description="where in the definition, e.g. steps[1](approve).approval.approvers")
    message: str


class PublishResult(View):
    name: str
    version: int
    digest: str
    created: bool = Field(description="False when identical content was already published as this version")
    warnings: list[PublishWarning] = Field(
        default_factory=list,
        description="What publishing accepted but the author should fix: reads of input the schema does "
        "not declare, steps that never run, approvers the tenant lacks (empty: none)",
    )


class DefinitionVersion(View):
    """A published version of a definition."""

    name: str
    version: int
    digest: str
    created_at: str


class DefinitionDocument(View):
    name: str
    version: int
    digest: str
    document: JSONObject = Field(description="the definition as the tenant published it (YAML as JSON)")


class RepairResult(View):
    """What an operator command did: the events it recorded (a four-eyes command records only its
    proposal, which a second operator confirms)."""

    run_id: str
    status: RunStatus
    events: list[str] = Field(description="the types of the events the command recorded")
    proposal: Recorded[Proposal] | MISSING = Field(
        default=MISSING, description="only when the command waits for a second operator"
    )


class MigrationPlan(View):
    """What moving a run to another version does (dry run), or did, with the command's answer."""

    model_config = ConfigDict(serialize_by_alias=True, validate_by_name=True)

    from_: DefinitionRef = Field(alias="from")
    to: Recorded[VersionRef]
    mapping: dict[str, str] = Field(description="step ids of the current version -> the target's")
    steps_added: list[str]
    steps_removed: list[str]
    current_step: Recorded[StepChange]
    carried: list[str] = Field(description="what the run carries over (pending approvals, timers, ...)")
    restart: str | None = Field(description="the step that starts again on the new version, if any")
    problems: list[str] = Field(description="why the migration is refused (empty: it is possible)")
    run_id: str
    ok: bool
    dry_run: bool
    status: RunStatus | MISSING = Field(default=MISSING, description="after a migration that was made")
    events: list[str] | MISSING = Field(default=MISSING, description="after a migration that was made")
    proposal: Recorded[Proposal] | MISSING = Field(
        default=MISSING, description="when the migration waits for a second operator"
    )
    request: MigrationRequestView | MISSING = Field(
        default=MISSING, description="when the migration waits for its approvers (nothing migrated yet)"
    )


class MigrationOutcome(View):
    run_id: str
    ok: bool
    problems: list[str]


class BulkMigration(View):
    """A bulk migration's report: one outcome per run (one run's refusal does not stop the others)."""

    definition: str
    from_version: int
    to_version: int
    dry_run: bool
    runs: int
    migrated: int
    report: list[MigrationOutcome]
    request: MigrationRequestView | MISSING = Field(
        default=MISSING,
        description="when the migration needs approval: the one request for the runs the report marks ok "
        "(none is migrated before it is granted)",
    )
