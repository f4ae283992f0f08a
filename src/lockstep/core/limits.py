"""Every bound that protects one tenant from another, in one place: its default, its setting, its meaning.

A tenant admin is untrusted by every other tenant. What they publish and what their callers send is
bounded in size, depth and cost so that no document, input or expression can crash the server or hold
it for long. Each limit here is named by the tenant setting that changes it (`lockstep tenants set`),
except the server-wide ones, which no tenant may raise. docs/security.md lists them all.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SERVER_LIMITS", "TENANT_LIMITS", "Limit", "tenant_limit"]


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
        # Expressions (core/exprcheck.py): the CEL library recurses per tree level and segfaults past
        # ~15,000 levels (~1,000 on a 512 KiB stack); the ceilings are what stored definitions get.
        Limit("max_expression_length", 4096, "characters", "one CEL expression", 16_384),
        Limit("max_expression_nesting", 32, "levels", "brackets ( [ { nested in one expression", 48),
        Limit(
            "max_expression_depth",
            200,
            "levels",
            "the tree of one expression: each operator of a chain, member access and bracket",
            2000,
        ),
        Limit("max_macro_nesting", 2, "levels", "comprehensions (exists, all, map...) inside others", 8),
        Limit(
            "max_expression_cost",
            500_000,
            "units of ~60 ns",
            "the worst case of one expression, or of one template's expressions together, on inputs "
            "at the tenant's max_list_items and max_input_bytes (500,000: 30 ms idle, 60 ms loaded)",
            8_000_000,
        ),
        # YAML (documents.py): counted while composing, before any tree is built.
        Limit(
            "max_yaml_aliases", 100, "aliases", "alias references (*name) in one definition document", 10_000
        ),
        Limit(
            "max_yaml_nodes", 50_000, "nodes", "scalars, sequences and mappings in one document", 1_000_000
        ),
    )
}


def tenant_limit(settings: dict[str, object], name: str) -> int:
    """The tenant's value of limit `name`: its setting (capped at the ceiling), else the default."""
    limit = TENANT_LIMITS[name]
    value = settings.get(name)
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return min(int(value), limit.ceiling)
    return limit.default
