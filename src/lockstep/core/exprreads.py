"""Which parts of the run's context an expression reads, as paths from a root: `input.card.number` reads
("input", "card", "number"), `steps.charge.output` reads ("steps", "charge", "output").

Statically and conservatively, on the tree of `exprparse` (the parser the cost check uses): a path stops
at the first part that is not a field name written in the expression (`input.items[i]` reads all of
("input", "items")), and a root used in any other way (`input`, `dyn(input).x`, `steps[name]`) is read
whole. Loop variables of comprehensions are not roots (their range is what is read), unless they are
named like one: then what the body reads through it counts as read from that root too.
"""

from __future__ import annotations

from .expr import ALLOWED_ROOTS, Expr
from .exprparse import MACROS, Node, Parser, tokens

__all__ = ["reads"]

Path = tuple[str, ...]


def reads(expr: Expr) -> frozenset[Path]:
    """The paths `expr` reads (each from a root: input, steps or run)."""
    if expr.path is not None:
        return frozenset({expr.path})
    # compile_expr parsed this very text after bounding its nesting, so parsing it again is safe; the
    # walk below is a loop, so a deep tree cannot exhaust the stack either.
    tree = Parser(tokens(expr.source)).parse()
    out: set[Path] = set()
    stack: list[tuple[Node, frozenset[str]]] = [(tree, frozenset())]
    while stack:
        node, scope = stack.pop()
        kind = node[0]
        if kind == "ident":
            if node[1] in ALLOWED_ROOTS and node[1] not in scope:
                out.add((node[1],))
        elif kind in ("select", "index"):
            path, keys, base = _chain(node)
            if base[0] == "ident" and base[1] in ALLOWED_ROOTS and base[1] not in scope:
                out.add((base[1], *path))
            else:
                stack.append((base, scope))
            stack.extend((k, scope) for k in keys)
        elif kind == "call":
            _, name, target, args = node
            if target is not None and name in MACROS and len(args) in (2, 3) and args[0][0] == "ident":
                var = args[0][1]
                inner = scope if var in ALLOWED_ROOTS else scope | {var}
                stack.append((target, scope))
                stack.extend((a, inner) for a in args[1:])
            else:
                stack.extend((n, scope) for n in ([target] if target is not None else []) + args)
        elif kind == "list":
            stack.extend((n, scope) for n in node[1])
        elif kind == "map":
            stack.extend((n, scope) for pair in node[1] for n in pair)
        elif kind == "cond":
            stack.extend((n, scope) for n in node[1:])
        elif kind == "op":
            stack.extend((n, scope) for n in node[2])
    return frozenset(out)


def _chain(node: Node) -> tuple[list[str], list[Node], Node]:
    """For a chain of field selections and indexes: the static path from its base (up to the first
    part that is not a literal name), the index expressions to walk, and the base node."""
    parts: list[tuple[str | None, Node | None]] = []
    while node[0] in ("select", "index"):
        if node[0] == "select":
            parts.append((node[2], None))
        else:
            key = node[2]
            literal = key[3] if key[0] == "lit" and len(key) > 3 else None
            parts.append((literal, None if literal is not None else key))
        node = node[1]
    parts.reverse()
    path: list[str] = []
    keys = [k for _, k in parts if k is not None]
    for name, _ in parts:
        if name is None:
            break
        path.append(name)
    return path, keys, node
