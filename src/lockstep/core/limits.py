"""Every bound that protects one tenant from another, in one place: its default, its setting, its meaning.

A tenant admin is untrusted by every other tenant. What they publish and what their callers send is
bounded in size, depth and cost so that no document, input or expression can crash the server or hold
it for long. Each limit here is named by the tenant setting that changes it (`lockstep tenants set`),
except the server-wide ones, which no tenant may raise. docs/security.md lists them all.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HISTORY_LIMITS", "SERVER_LIMITS", "TENANT_LIMITS", "Limit", "history_limit", "tenant_limit"]


@dataclass(frozen=True)
class Limit:
    name: str
    default: int
    unit: str
    protects: str
    # The largest value a tenant setting may take: raising a bound past it would void the cost analysis
    # that the other limits rely on (e.g. max_list_items bounds every comprehension's cost).
    ceiling: int


# Bounds on what one tenant's callers send and their activities return (per value, checked on entry).
TENANT_LIMITS: dict[str, Limit] = {
    limit.name: limit
    for limit in (
        Limit("max_input_bytes", 256 * 1024, "bytes", "a run's input, as compact JSON", 8 * 1024 * 1024),
        Limit(
            "max_output_bytes",
            256 * 1024,
            "bytes",
            "one activity result (output, or error code and message), as compact JSON",
            8 * 1024 * 1024,
        ),
        Limit(
            "max_payload_bytes",
            64 * 1024,
            "bytes",
            "any other payload a caller adds to a run's history (comments, operator edits, event payloads)",
            1024 * 1024,
        ),
        Limit("max_json_depth", 32, "levels", "nesting of objects and arrays in any JSON value", 64),
        Limit(
            "max_list_items",
            1000,
            "items",
            "elements of any one array in an input or output (bounds the cost of every expression)",
            10_000,
        ),
    )
}

# Server-wide bounds: the same for every tenant, set by whoever runs the server.
SERVER_LIMITS: dict[str, Limit] = {
    limit.name: limit
    for limit in (
        Limit("max_request_bytes", 16 * 1024 * 1024, "bytes", "one HTTP request body (413 above)", 1 << 30),
        Limit("max_definition_bytes", 1024 * 1024, "bytes", "one published definition document", 1 << 24),
    )
}


def tenant_limit(settings: dict[str, object], name: str) -> int:
    """The tenant's value of limit `name`: its setting (capped at the ceiling), else the default."""
    limit = TENANT_LIMITS[name]
    value = settings.get(name)
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return min(int(value), limit.ceiling)
    return limit.default


# Bounds on events that people and workers can make a run record again and again. Without them an
# approver clicking "Review", an operator re-sending links or a worker replaying a stale report could grow
# a run's history until the tenant's max_history_events cancels it. Fixed (not tenant settings): they
# bound evidence, not work, and every count above them is refused (or, for stale reports, answered as
# ignored without being appended), never silently dropped.
HISTORY_LIMITS: dict[str, Limit] = {
    limit.name: limit
    for limit in (
        Limit(
            "max_ignored_results_per_attempt",
            3,
            "events",
            "ResultIgnored events per task id; later stale reports are answered as ignored, not appended",
            3,
        ),
        Limit(
            "max_ignored_results_per_run",
            50,
            "events",
            "ResultIgnored events per run, over all task ids (made-up task ids included)",
            50,
        ),
        Limit("max_links_per_approver", 5, "links", "approval links minted per approver per request", 5),
        Limit("max_approver_replacements", 10, "events", "ApproverReplaced events per approval request", 10),
        Limit("max_repair_proposals", 20, "proposals", "four-eyes repair proposals per run", 20),
    )
}


def history_limit(name: str) -> int:
    return HISTORY_LIMITS[name].default
