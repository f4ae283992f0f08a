"""Publishing definitions: a document is checked against the publish limits (and its tenant's), and
stored as the next version of its name unless the same content is already published."""

from __future__ import annotations

import re
from dataclasses import replace

from ..core.canonical import JSONValue
from ..core.definition import ApprovalStep, DefinitionError, Limits, parse_definition
from ..core.exprcheck import ExprLimits, expression_limits, publish_limits
from ..core.limits import tenant_limit
from ..core.timeutil import iso
from ..errors import Conflict, InvalidInput, NotFound
from ..store import ConcurrencyError, DefinitionRow, PublishTx
from .approvers import approver_warnings, migration_approver_warnings
from .kernel import refuse_reserved
from .port import KernelPort
from .secrets import egress_warnings, parsed_policy, top_of
from .views import DefinitionDocument, DefinitionVersion, PublishResult, PublishWarning

__all__ = ["Definitions"]

_STEP_PATH = re.compile(r"^steps\[(\d+)\]")


class Definitions:
    def __init__(self, kernel: KernelPort[PublishTx], limits: Limits | None = None) -> None:
        self.kernel = kernel
        # Publish-time limits; their expression bounds are the server's unless `limits` sets its own.
        limits = limits or Limits()
        if limits.expressions == ExprLimits():
            limits = replace(limits, expressions=publish_limits(kernel.server_limits))
        if limits.max_sensitive_pointers == Limits.max_sensitive_pointers:
            limits = replace(limits, max_sensitive_pointers=kernel.server_limits["max_sensitive_pointers"])
        if limits.max_pointer_length == Limits.max_pointer_length:
            limits = replace(limits, max_pointer_length=kernel.server_limits["max_pointer_length"])
        self.limits = limits

    def publish(self, tenant: str, document: JSONValue) -> PublishResult:
        """Store `document` as the next version of its name (or answer the version that has its content);
        the result's warnings say what was accepted but should be fixed (docs/definitions.md)."""
        limits = self.limits
        with self.kernel.read() as tx:
            row = tx.tenant(tenant)
            accounts = tx.users(tenant) if _approves(document) else []
            egress = parsed_policy(tx.egress_policy(tenant))
        if row is not None and "max_steps" in row.settings:
            limits = replace(limits, max_steps=int(row.settings["max_steps"]))
        if row is not None:  # the shape limits (parallel and for-each steps) are the tenant's too
            limits = replace(
                limits,
                max_branch_depth=tenant_limit(row.settings, "max_branch_depth"),
                max_items=tenant_limit(row.settings, "max_items"),
                max_expanded_steps=tenant_limit(row.settings, "max_expanded_steps"),
                max_active_attempts=tenant_limit(row.settings, "max_active_attempts"),
            )
        if row is not None:  # expression costs are bounded on this tenant's data bounds
            limits = replace(limits, expressions=expression_limits(limits.expressions, row.settings))
        try:
            d = parse_definition(document, limits)
        except DefinitionError as exc:
            raise InvalidInput(str(exc)) from None
        refuse_reserved(d.document, "the definition")  # a template must not write a forged sealed value
        warnings = [PublishWarning(path=p, message=m) for p, m in d.warnings]
        for i, step in enumerate(d.steps):
            if isinstance(step, ApprovalStep) and (found := approver_warnings(tenant, step, accounts)):
                warnings.append(
                    PublishWarning(path=f"steps[{i}]({step.id}).approval.approvers", message="; ".join(found))
                )
        top = {s.id: i for i, s in enumerate(d.steps)}
        for sid, why in egress_warnings(egress, d):
            where = f"steps[{top[sid]}]({sid})" if sid in top else f"steps[{top_of(d, sid)}]...({sid})"
            warnings.append(
                PublishWarning(path=f"{where}.http.url", message=f"{why} (checked again when it runs)")
            )
        if d.migration_approval is not None and (
            found := migration_approver_warnings(tenant, d.migration_approval, accounts)
        ):
            where = "migration.requires_approval.approvers"
            warnings.append(PublishWarning(path=where, message="; ".join(found)))
        warnings.sort(key=_in_document_order)
        for _ in range(3):
            try:
                with self.kernel.write() as tx:
                    same = tx.definition_by_digest(tenant, d.name, d.digest)
                    if same is not None:
                        return PublishResult(
                            name=d.name,
                            version=same.version,
                            digest=d.digest,
                            created=False,
                            warnings=warnings,
                        )
                    latest = tx.definition(tenant, d.name, None)
                    version = (latest.version if latest else 0) + 1
                    tx.insert_definition(
                        tenant, DefinitionRow(d.name, version, d.digest, d.document), iso(self.kernel.clock())
                    )
                    return PublishResult(
                        name=d.name, version=version, digest=d.digest, created=True, warnings=warnings
                    )
            except ConcurrencyError:
                continue
        raise Conflict(f"definition {d.name} is being published concurrently; try again")

    def definition_document(self, tenant: str, name: str, version: int) -> DefinitionDocument:
        with self.kernel.read() as tx:
            row = tx.definition(tenant, name, version)
        if row is None:
            raise NotFound(f"no definition {name} version {version} in tenant {tenant}")
        return DefinitionDocument(
            name=row.name, version=row.version, digest=row.digest, document=row.document
        )

    def definitions(self, tenant: str) -> list[DefinitionVersion]:
        with self.kernel.read() as tx:
            rows = tx.definitions(tenant)
        return [DefinitionVersion(**r) for r in rows]


def _in_document_order(w: PublishWarning) -> int:
    """Warnings in the order of the steps they are about (the definition's own fields after them)."""
    m = _STEP_PATH.match(w.path)
    return int(m.group(1)) if m else 1 << 30


def _approves(document: JSONValue) -> bool:
    """Whether a document has approval steps or a migration policy (whose approvers are looked up in the
    tenant)."""
    steps = document.get("steps") if isinstance(document, dict) else None
    if isinstance(document, dict) and "migration" in document:  # its requires_approval names approvers
        return True
    return isinstance(steps, list) and any(isinstance(s, dict) and "approval" in s for s in steps)
