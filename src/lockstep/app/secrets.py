"""Secrets by reference and the tenants' egress policies: what the `http` step may use and reach.

Secrets. A tenant admin sets a secret's value (`lockstep secrets set NAME`, value from stdin; `PUT
/v1/secrets/NAME`); setting it again adds a version (rotation). Each version is stored only sealed: a
marker (core/sealed.py) under a data key of the secret's own, in `run_keys` under the id
`secret:<tenant>/<name>/<nonce>` (so a tenant key rotation re-wraps it and `tenants shred` destroys it,
like a run's), with tenant, key id and version as associated data. Deleting every version destroys
that key, so a copy of the database taken later cannot open them; a secret set again after that gets
a new key. No API, CLI command or page returns a value: `list` shows names, versions and dates. The
one way to a clear value is `use`, which the built-in http executor of a database worker calls when it
sends a request (runtime/httpstep.py); a refused use (no such secret in the run's tenant, a version
gone, a key destroyed) is audited. A secret never enters an event: the task input names it (and a
pinned version), the step's output records the name and the version used.

Egress. A tenant's policy (core/egress.py) is set whole by a tenant admin (`lockstep tenants egress set`,
`PUT /v1/egress`); none means nothing is allowed. `allow_loopback` is refused unless this server's
operator set `egress_allow_loopback=1`; the worker checks the setting again when it connects.
"""

from __future__ import annotations

import secrets as random
from collections.abc import Mapping

from ..core.canonical import compact_json, parse_json
from ..core.definition import Definition, HttpStep
from ..core.definition.shapes import all_steps
from ..core.egress import NO_POLICY, EgressPolicy, PolicyError, parse_policy, url_refusal
from ..core.sealed import label_of
from ..core.timeutil import iso
from ..errors import InvalidInput, NotFound, Refused
from ..store import EgressRow, Sealer, SecretRow, SecretTx
from .audit import Audit
from .port import KernelPort
from .principals.roles import check_name
from .views.secrets import EgressView, SecretDeleted, SecretVersionView, SecretView

__all__ = ["MAX_SECRET_BYTES", "Egress", "Secrets", "egress_warnings", "parsed_policy", "top_of"]

MAX_SECRET_BYTES = 8192
MAX_VERSIONS = 20  # kept per secret; older ones are deleted when a new one is set
LABEL = "Secret"


def _label(version: int) -> str:
    return label_of(LABEL, f"/v{version}")


class Secrets:
    def __init__(self, kernel: KernelPort[SecretTx], sealer: Sealer | None) -> None:
        self.kernel = kernel
        self.sealer = sealer
        self.audit = Audit(kernel)

    def set(self, tenant: str, name: str, value: str, *, actor: str | None = None) -> SecretView:
        """Store `value` as the secret's next version (its first: a new secret)."""
        check_name("secret", name)
        if not value:
            raise InvalidInput(f"secret {name}: the value is empty (give it on stdin)")
        if len(value.encode()) > MAX_SECRET_BYTES:
            raise InvalidInput(f"secret {name}: the value is over {MAX_SECRET_BYTES} bytes")
        if self.sealer is None:  # pragma: no cover - the service always passes its key ring
            raise Refused("this process cannot seal secrets (no key ring)", code="no_key")
        with self.kernel.write() as tx:
            _tenant(tx, tenant)
            rows = tx.secret_versions(tenant, name)
            version = rows[-1].version + 1 if rows else 1
            key_id = rows[-1].key_id if rows else f"secret:{tenant}/{name}/{random.token_hex(8)}"
            (marker,) = self.sealer.seal(tx, tenant, key_id, [(_label(version), value)])
            at = iso(self.kernel.clock())
            tx.insert_secret(SecretRow(tenant, name, version, key_id, compact_json(marker), at, actor))
            for old in rows[: max(0, len(rows) + 1 - MAX_VERSIONS)]:
                tx.delete_secret(tenant, name, old.version)
            self.audit.record(tenant, actor, "secret.set", f"secret:{name}", "ok", tx=tx, version=version)
            return _view(name, tx.secret_versions(tenant, name))

    def list(self, tenant: str) -> list[SecretView]:
        """Every secret of the tenant: names, versions and dates (never a value)."""
        with self.kernel.read() as tx:
            _tenant(tx, tenant)
            rows = tx.secrets_of(tenant)
        names = list(dict.fromkeys(r.name for r in rows))
        return [_view(n, [r for r in rows if r.name == n]) for n in names]

    def delete(
        self, tenant: str, name: str, *, version: int | None = None, actor: str | None = None
    ) -> SecretDeleted:
        """Delete one version, or the secret (every version, and its data key is destroyed)."""
        check_name("secret", name)
        with self.kernel.write() as tx:
            _tenant(tx, tenant)
            rows = tx.secret_versions(tenant, name)
            if not rows or (version is not None and all(r.version != version for r in rows)):
                what = f"version {version} of secret {name}" if version is not None else f"secret {name}"
                raise NotFound(f"no {what} in tenant {tenant}: `lockstep secrets list` shows them")
            gone = tx.delete_secret(tenant, name, version)
            destroyed = not tx.secret_versions(tenant, name)
            if destroyed and tx.run_key(rows[0].key_id) is not None:
                tx.forget_run_key(rows[0].key_id, tenant, iso(self.kernel.clock()))
            self.audit.record(
                tenant,
                actor,
                "secret.delete",
                f"secret:{name}",
                "ok",
                tx=tx,
                version=version,
                versions_deleted=gone,
                key_destroyed=destroyed,
            )
        return SecretDeleted(name=name, deleted_versions=gone, key_destroyed=destroyed)

    def use(self, tenant: str, name: str, version: int | None, run_id: str, step: str) -> tuple[int, str]:
        """(version, clear value) for the http executor of a worker of this tenant's run; a refusal is
        audited (in its own transaction) and raised as Refused. The value is never logged."""
        with self.kernel.read() as tx:
            rows = tx.secret_versions(tenant, name)
            chosen = (
                rows[-1]
                if rows and version is None
                else next((r for r in rows if r.version == version), None)
            )
            if chosen is not None:
                key = tx.run_key(chosen.key_id)
                if key is not None and key.wrapped is not None:
                    try:
                        value = self.kernel.opened(tx, tenant, chosen.key_id, parse_json(chosen.sealed))
                    except Refused as exc:
                        why = f"secret {name} version {chosen.version} cannot be opened: {exc}"
                    else:
                        if isinstance(value, str):
                            return chosen.version, value
                        why = f"secret {name} version {chosen.version} did not open to a value"
                else:
                    why = f"secret {name}'s key was destroyed (the tenant was shredded): set it again"
            elif rows:
                have = ", ".join(str(r.version) for r in rows)
                why = f"secret {name} has no version {version} (versions: {have})"
            else:
                why = (
                    f"tenant {tenant} has no secret {name}: set it with `lockstep secrets set --tenant "
                    f"{tenant} {name}` (a step can only name a secret of its own run's tenant)"
                )
        self.audit.record(
            tenant,
            f"run:{run_id}",
            "secret.use",
            f"secret:{name}",
            "refused",
            run=run_id,
            step=step,
            reason=why,
        )
        raise Refused(why, code="secret_unavailable")


def _tenant(tx: SecretTx, tenant: str) -> None:
    if tx.tenant(tenant) is None:
        raise NotFound(f"no tenant {tenant}")


def _view(name: str, rows: list[SecretRow]) -> SecretView:
    versions = [
        SecretVersionView(version=r.version, created_at=r.created_at, created_by=r.created_by) for r in rows
    ]
    return SecretView(name=name, latest=rows[-1].version if rows else 0, versions=versions)


class Egress:
    def __init__(self, kernel: KernelPort[SecretTx]) -> None:
        self.kernel = kernel
        self.audit = Audit(kernel)

    def set(self, tenant: str, document: Mapping[str, object], *, actor: str | None = None) -> EgressView:
        """Replace the tenant's policy with `document` (allow, allow_hosts, allow_http, allow_loopback)."""
        try:
            policy = parse_policy(document)
        except PolicyError as exc:
            raise InvalidInput(f"egress policy of tenant {tenant}: {exc}") from None
        if policy.allow_loopback and self.kernel.server_limits["egress_allow_loopback"] != 1:
            raise Refused(
                "allow_loopback is a test setting that this server does not allow: its operator must start "
                "it with --limit egress_allow_loopback=1 (never on a server that tenants share)",
                code="loopback_not_allowed",
            )
        row = EgressRow(tenant, policy.to_json(), iso(self.kernel.clock()), actor)
        with self.kernel.write() as tx:
            _tenant(tx, tenant)
            tx.set_egress_policy(row)
            self.audit.record(
                tenant, actor, "egress.set", f"tenant:{tenant}", "ok", tx=tx, **policy.to_json()
            )
        return _egress_view(tenant, policy, row)

    def show(self, tenant: str) -> EgressView:
        with self.kernel.read() as tx:
            _tenant(tx, tenant)
            row = tx.egress_policy(tenant)
        return _egress_view(tenant, parsed_policy(row), row)

    def policy(self, tenant: str) -> EgressPolicy:
        """The policy an http step of the tenant is checked against now (none: nothing allowed)."""
        with self.kernel.read() as tx:
            return parsed_policy(tx.egress_policy(tenant))

    def refused(self, tenant: str, run_id: str, step: str, url: str, reason: str) -> None:
        """Audit a request the policy or the address checks refused (the URL without its query)."""
        self.audit.record(
            tenant,
            f"run:{run_id}",
            "egress.refuse",
            url[:500],
            "refused",
            run=run_id,
            step=step,
            reason=reason,
        )


def parsed_policy(row: EgressRow | None) -> EgressPolicy:
    if row is None:
        return NO_POLICY
    try:
        return parse_policy(row.policy)
    except PolicyError:  # a row edited by hand: allow nothing rather than guess
        return NO_POLICY


def _egress_view(tenant: str, policy: EgressPolicy, row: EgressRow | None) -> EgressView:
    return EgressView(
        tenant=tenant,
        allow=list(policy.allow),
        allow_hosts=list(policy.allow_hosts),
        allow_http=policy.allow_http,
        allow_loopback=policy.allow_loopback,
        updated_at=row.updated_at if row else None,
        updated_by=row.updated_by if row else None,
    )


def egress_warnings(policy: EgressPolicy, d: Definition) -> list[tuple[str, str]]:
    """(step, reason) for each http step whose URL is constant and outside the tenant's policy now:
    published all the same (the policy may change before it runs; the worker checks it then)."""
    out = []
    for step in all_steps(d.steps):
        if isinstance(step, HttpStep) and step.url is not None and step.url.is_constant:
            why = url_refusal(policy, str(step.url.raw))
            if why is not None:
                out.append((step.id, why))
    return out


def top_of(d: Definition, sid: str) -> int:
    """The index of the top-level step that holds nested step `sid` (for a warning's path)."""
    for i, step in enumerate(d.steps):
        if any(s.id == sid for s in all_steps([step])):
            return i
    return len(d.steps)  # pragma: no cover - every nested step is inside a top-level one
