"""Tenant limits: the bounds a tenant's settings put on values (inputs, outputs, reasons, comments) and
on starts (active runs, armed timers, start rate). A refusal names the limit, what was found and the
setting that raises it.

Rules over a transaction or a settings mapping, nothing more: the kernel (which caches the settings)
and the feature services apply them, so this module imports nothing of the application layer.
"""

from __future__ import annotations

from ..core.limits import TENANT_LIMITS, Settings, tenant_limit
from ..core.shape import Shape, measure, over_limit
from ..errors import InvalidInput, RateLimited
from ..store import QuotaTx, TenantRow

__all__ = ["admit", "check_input", "check_value", "limit_error", "limit_message", "measured"]

_CODES = {"max_json_depth": "too_deep", "max_list_items": "too_many_items"}


def limit_message(tenant: str, what: str, over: tuple[str, int, int, str]) -> str:
    name, found, allowed, at = over
    if name == "max_json_depth":
        found_text = f"nests at least {found} levels of arrays/objects (at {at})"
    elif name == "max_list_items":
        found_text = f"has an array or object of at least {found} elements (at {at})"
    else:
        found_text = f"is {found} bytes as compact JSON"
    ceiling = TENANT_LIMITS[name].ceiling
    if allowed >= ceiling:
        return f"{what} {found_text}, over {name}={ceiling}, the most any tenant may allow; send less"
    return (
        f"{what} {found_text}, over tenant {tenant}'s limit {name}={allowed}; send less, or raise it with "
        f"`lockstep tenants set {tenant} --{name.replace('_', '-')} N` (at most {ceiling})"
    )


def limit_error(tenant: str, what: str, over: tuple[str, int, int, str]) -> InvalidInput:
    name, found, allowed, at = over
    return InvalidInput(
        limit_message(tenant, what, over),
        code=_CODES.get(name, "too_large"),
        extra={"limit": name, "found": found, "allowed": allowed, "at": at or None},
    )


def measured(settings: Settings, value: object, size_limit: str, root: str) -> Shape:
    """`value` measured with the tenant's own bounds: a refused value costs at most one encode and a
    walk of what the limits allow (never a walk of a huge value)."""
    return measure(
        value,
        root,
        max_bytes=tenant_limit(settings, size_limit),
        max_depth=tenant_limit(settings, "max_json_depth"),
        max_width=tenant_limit(settings, "max_list_items"),
    )


def check_value(
    settings: Settings, tenant: str, value: object, size_limit: str, what: str, root: str = "value"
) -> Shape:
    """Refuse (InvalidInput naming the limit, the size found and the setting that raises it) a value
    over the tenant's `size_limit`, max_json_depth or max_list_items; else its shape."""
    shape = measured(settings, value, size_limit, root)
    over = over_limit(settings, shape, size_limit)
    if over is not None:
        raise limit_error(tenant, what, over)
    return shape


def check_input(row: TenantRow | None, tenant: str, shape: Shape) -> Settings:
    """The tenant's settings from `row` (its row as the start's transaction read it), after refusing an
    input over its limits (the input was measured before the transaction: nothing is walked while it is
    open)."""
    settings = row.settings if row else {}
    over = over_limit(settings, shape, "max_input_bytes")
    if over is not None:
        raise limit_error(tenant, "the run input", over)
    return settings


def admit(tx: QuotaTx, row: TenantRow | None, tenant: str, now_ms: int) -> None:
    """Tenant limits at the edge, inside the start transaction: refused starts write nothing. `row` is
    the tenant's row as this transaction read it for check_input (one read per start, not two)."""
    if row is None:
        return
    if {"max_active_runs", "max_timers", "starts_per_second"} & row.settings.keys():
        # Count under the tenant's row lock: two concurrent starts must not both see room for one
        # more (READ COMMITTED on PostgreSQL; found by the quota_exhausted fault scenario).
        tx.lock_tenant(tenant)
        row = tx.tenant(tenant) or row
    cap = row.settings.get("max_active_runs")
    if cap is not None:
        active = tx.active_runs(tenant)
        if active >= cap:
            raise RateLimited(
                f"tenant {tenant} has {active} active runs, its limit (max_active_runs={cap}); "
                f"start again when some have finished",
                retry_after=5.0,
                code="too_many_active_runs",
            )
    max_timers = row.settings.get("max_timers")
    if max_timers is not None:
        armed = tx.scheduled_timers(tenant)
        if armed >= max_timers:
            raise RateLimited(
                f"tenant {tenant} has {armed} durable timers armed, its limit "
                f"(max_timers={max_timers}); start again when some have fired",
                retry_after=30.0,
                code="too_many_timers",
            )
    rate = row.settings.get("starts_per_second")
    if rate is not None:
        capacity = max(1.0, 2.0 * rate)
        tokens = capacity if row.bucket_tokens is None else row.bucket_tokens
        if row.bucket_at_ms is not None:
            tokens = min(capacity, tokens + max(0, now_ms - row.bucket_at_ms) / 1000 * rate)
        if tokens < 1.0:
            raise RateLimited(
                f"tenant {tenant} is starting runs faster than its limit (starts_per_second={rate})",
                retry_after=(1.0 - tokens) / rate,
                code="start_rate_exceeded",
            )
        tx.update_tenant_bucket(tenant, tokens - 1.0, now_ms)
