"""The stable error codes lockstep can answer with, for the `/problems/{code}` pages.

Codes are string literals where errors are raised (`code = "..."` on an error class or in a handler,
`code="..."` when raising, `Rejected("...", ...)` in the core, `problem(status, "...")` in the API), so
the list is read from the package's own source once, instead of a hand-kept copy that drifts.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

__all__ = ["known_codes", "slug"]

_PACKAGE = Path(__file__).resolve().parents[1]
_CODE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$")


def slug(code: str) -> str:
    """The last part of a problem's `type` URI: `not_found` -> `not-found`."""
    return code.replace("_", "-")


def _strings(node: ast.AST) -> list[str]:
    return [
        n.value
        for n in ast.walk(node)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and _CODE.match(n.value)
    ]


def _assigned(value: ast.expr) -> list[str]:
    """Codes a `code = ...` assignment can take: a literal, either side of `a if c else b`, or the
    values and default of a literal lookup table (`{404: "not_found"}.get(status, "http_error")`)."""
    if isinstance(value, ast.Constant):
        return _strings(value)
    if isinstance(value, ast.IfExp):
        return _assigned(value.body) + _assigned(value.orelse)
    f = value.func if isinstance(value, ast.Call) else None
    if isinstance(value, ast.Call) and isinstance(f, ast.Attribute) and isinstance(f.value, ast.Dict):
        return [s for v in f.value.values if v is not None for s in _assigned(v)] + [
            s for a in value.args[1:] for s in _assigned(a)
        ]
    return []


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _codes_in(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "code" for t in targets):
                found.update(_assigned(node.value))
        elif isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "code" and isinstance(kw.value, ast.Constant):
                    found.update(_strings(kw.value))
            position = {"Rejected": 0, "problem": 1}.get(_callee(node))
            if position is not None and len(node.args) > position:
                arg = node.args[position]
                if isinstance(arg, ast.Constant):
                    found.update(_strings(arg))
    return found


@cache
def known_codes() -> dict[str, str]:
    """slug -> code, for every code the package's source can raise."""
    codes: set[str] = set()
    for path in sorted(_PACKAGE.rglob("*.py")):
        codes |= _codes_in(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return {slug(c): c for c in sorted(codes)}
