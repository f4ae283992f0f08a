"""The static type of a CEL expression where it is known, for the one question publishing asks: can a
choice condition ever be `true` or `false`? (`if: "input.amount"` on a number never is.)

The CEL library lockstep uses (common-expression-language) has no type checker: it parses and
evaluates, and its programs list the variables they use, not their types. So the type is inferred here,
on the tree of `exprparse` (bounded like every parse of tenant text: compile_expr checked the nesting
first), and only as far as it is certain: literals, comparisons and the logical operators, the functions
whose result type is fixed (`size`, `has`, `contains`...), the run's context whose fields are fixed
(`run.version` is an int, `steps.<id>.status` a string) and the input where `input_schema` gives one
type. Anything else is unknown (None), and an unknown type is never refused.
"""

from __future__ import annotations

from collections.abc import Callable

from .exprparse import MACROS, Node, Parser, tokens

__all__ = ["TypeOf", "condition_type"]

# The type of a read of the context (a path from a root), or None when it is not known.
TypeOf = Callable[[tuple[str, ...]], str | None]

_BOOL = "boolean"
_BOOLEAN_OPS = {"==", "!=", "<", "<=", ">", ">=", "in", "&&", "||", "!"}
_RESULTS = {
    **dict.fromkeys(("has", "contains", "startsWith", "endsWith", "matches", "bool"), _BOOL),
    **dict.fromkeys(("all", "exists", "exists_one"), _BOOL),
    **dict.fromkeys(("size", "int", "uint", "double"), "number"),
    **dict.fromkeys(("map", "filter"), "list"),
    "string": "string",
    "bytes": "bytes",
    "timestamp": "timestamp",
    "duration": "duration",
    "type": "type",
}
_CONTEXT: dict[tuple[str, ...], str] = {
    ("run", "id"): "string",
    ("run", "tenant"): "string",
    ("run", "definition"): "string",
    ("run", "version"): "number",
    ("run", "started_at"): "string",
}
_STEP_FIELDS = {"status": "string", "attempts": "number"}


class _TypedParser(Parser):
    """exprparse's parser, keeping what kind of literal each literal is (the cost check does not
    need it, so the shared parser folds numbers, true, false and null into one node)."""

    def primary(self) -> Node:
        kind, text, _ = self.tokens[self.i] if self.i < len(self.tokens) else ("", "", 0)
        node = super().primary()
        if node == ("lit", 0, 8) and (kind == "num" or text in ("true", "false", "null")):
            return ("lit", 0, 8, None, text)
        return node


def condition_type(source: str, type_of: TypeOf) -> str | None:
    """The type of `source` when known and certain, as a JSON Schema type name (boolean, number,
    string, null, list, object) or a CEL one (bytes, timestamp, duration, type); None when unknown.
    `source` must have compiled (compile_expr bounded its nesting)."""
    try:
        return _Typer(type_of).of(_TypedParser(tokens(source)).parse(), frozenset())
    except RecursionError:  # a tree as deep as compile_expr allows, on a deeper stack: not known
        return None


class _Typer:
    def __init__(self, type_of: TypeOf) -> None:
        self.type_of = type_of

    def of(self, node: Node, scope: frozenset[str]) -> str | None:
        kind = node[0]
        if kind == "lit":
            return _literal(node)
        if kind == "list":
            return "list"
        if kind == "map":
            return "object"
        if kind in ("ident", "select", "index"):
            path = _path(node, scope)
            if path is None:
                return None
            if path[0] == "steps":
                return _STEP_FIELDS.get(path[2]) if len(path) == 3 else None
            return _CONTEXT.get(path) if path[0] == "run" else self.type_of(path)
        if kind == "call":
            _, name, target, args = node
            if target is not None and name in MACROS and len(args) in (2, 3):
                return _RESULTS[name]
            return _RESULTS.get(name)
        if kind == "cond":
            then, other = self.of(node[2], scope), self.of(node[3], scope)
            return then if then == other else None
        op, operands = node[1], node[2]
        if op in _BOOLEAN_OPS:
            return _BOOL
        types = [self.of(n, scope) for n in operands]
        if op == "-" and len(types) == 1:
            return "number" if types[0] == "number" else None
        if all(t == "number" for t in types):
            return "number"
        if op == "+" and types[0] in ("string", "list") and all(t == types[0] for t in types):
            return types[0]
        return None


def _literal(node: Node) -> str | None:
    if len(node) < 5:
        return None
    text = str(node[4])
    if text in ("true", "false"):
        return _BOOL
    if text == "null":
        return "null"
    if text[:1].isdigit() or text[:1] == ".":
        return "number"
    return "bytes" if text[:1] in "bB" or text[:2].lower() in ("rb", "br") else "string"


def _path(node: Node, scope: frozenset[str]) -> tuple[str, ...] | None:
    """The static path a chain of field selections reads from a root of the context, or None."""
    parts: list[str] = []
    while node[0] in ("select", "index"):
        key = node[2]
        if node[0] == "select":
            parts.append(key)
        elif key[0] == "lit" and len(key) > 3 and key[3] is not None:
            parts.append(key[3])
        else:
            return None
        node = node[1]
    if node[0] != "ident" or node[1] in scope or node[1] not in ("input", "steps", "run"):
        return None
    return (node[1], *reversed(parts))
