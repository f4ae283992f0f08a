"""Expressions and templates: CEL (Common Expression Language) compiled once, evaluated with a context.

CEL is standard, side-effect free and always terminates, which is what tenant-supplied logic needs.
A *template* is any JSON value whose strings may hold `${expr}` parts: a string that is exactly one
`${expr}` yields the expression's typed value; otherwise the parts are rendered into a string.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

import cel

from .timeutil import iso

__all__ = ["ALLOWED_ROOTS", "ExprError", "Template", "compile_expr", "compile_template", "evaluate"]

ALLOWED_ROOTS = frozenset({"input", "steps", "run"})
_PATH = re.compile(r"^(?:input|steps|run)(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")
_MACRO_VAR = re.compile(r"\.(?:all|exists|exists_one|map|filter)\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,")


class ExprError(ValueError):
    """An expression that does not compile, or that fails when evaluated (message says which and why)."""


@dataclass(frozen=True)
class Expr:
    source: str
    program: Any
    roots: frozenset[str]
    # A plain field path like `input.order.id` is resolved directly: exact (no int/double conversion
    # of big integers) and much cheaper than a CEL evaluation.
    path: tuple[str, ...] | None = None


@lru_cache(maxsize=4096)
def compile_expr(source: str) -> Expr:
    """Compile a CEL expression; raise ExprError for syntax errors or unknown variables."""
    if not source.strip():
        raise ExprError("empty expression")
    try:
        program = cel.compile(source)
    except Exception as exc:  # the CEL binding raises ValueError with a caret diagram; keep line one
        first = str(exc).split("\n")[0]
        raise ExprError(f"invalid expression `{source}`: {first}") from None
    roots = frozenset(program.variables())
    # Macros (all, exists, exists_one, map, filter) bind a loop variable that variables() also lists.
    bound = {v for v in _MACRO_VAR.findall(source) if not _used_outside_macros(source, v)}
    roots = roots - bound
    unknown = sorted(roots - ALLOWED_ROOTS)
    if unknown:
        raise ExprError(
            f"unknown variable {', '.join(unknown)} in `{source}`: "
            f"expressions may use only input, steps.<id>.output and run"
        )
    path = tuple(source.strip().split(".")) if _PATH.match(source.strip()) else None
    return Expr(source, program, roots, path)


def _used_outside_macros(source: str, var: str) -> bool:
    """True if `var` appears outside the macro calls that bind it (so it is really a free variable)."""
    text = source
    for m in reversed(
        list(re.finditer(r"\.(?:all|exists|exists_one|map|filter)\(\s*" + re.escape(var) + r"\s*,", source))
    ):
        depth, j, quote = 1, m.end(), ""
        while j < len(text) and depth:
            ch = text[j]
            if quote:
                if ch == "\\":
                    j += 1
                elif ch == quote:
                    quote = ""
            elif ch in "\"'":
                quote = ch
            elif ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            j += 1
        text = text[: m.start()] + text[j:]
    text = re.sub(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'", "", text)
    return re.search(r"(?<![A-Za-z0-9_.])" + re.escape(var) + r"(?![A-Za-z0-9_])", text) is not None


def _to_json(value: Any) -> Any:
    """CEL results may be timestamps or bytes; events hold JSON only."""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, Mapping):
        return {str(k): _to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_json(v) for v in value]
    return value


def evaluate(expr: Expr, context: Mapping[str, Any]) -> Any:
    """Evaluate; every failure (missing field, type mismatch, division by zero) becomes ExprError."""
    if expr.path is not None:
        value: Any = context
        for i, part in enumerate(expr.path):
            if not isinstance(value, Mapping) or part not in value:
                where = ".".join(expr.path[:i]) or "the context"
                raise ExprError(f"`{expr.source}`: no such field '{part}' in {where}")
            value = value[part]
        return value
    try:
        return _to_json(expr.program.execute(dict(context)))
    except KeyError as exc:
        raise ExprError(f"`{expr.source}`: no such field {exc}") from None
    except Exception as exc:
        raise ExprError(f"`{expr.source}`: {str(exc).splitlines()[0]}") from None


def _split(text: str) -> list[str | Expr]:
    """Split a string into literal parts and `${...}` expressions, honouring braces and quotes inside."""
    parts: list[str | Expr] = []
    i = 0
    lit: list[str] = []
    while i < len(text):
        if text.startswith("${", i):
            j, depth, quote = i + 2, 1, ""
            while j < len(text):
                c = text[j]
                if quote:
                    if c == "\\":
                        j += 1
                    elif c == quote:
                        quote = ""
                elif c in "\"'":
                    quote = c
                elif c == "{":
                    depth += 1
                elif c == "}":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            if depth != 0:
                raise ExprError(f"unclosed `${{` in {text!r}: add the closing }}")
            if lit:
                parts.append("".join(lit))
                lit = []
            parts.append(compile_expr(text[i + 2 : j]))
            i = j + 1
        else:
            lit.append(text[i])
            i += 1
    if lit:
        parts.append("".join(lit))
    return parts


@dataclass(frozen=True)
class Template:
    """A compiled template: render(context) gives a JSON value."""

    raw: Any
    _compiled: Any

    @property
    def is_constant(self) -> bool:
        return not _has_expr(self._compiled)

    def expressions(self) -> list[Expr]:
        out: list[Expr] = []
        _collect(self._compiled, out)
        return out

    def render(self, context: Mapping[str, Any]) -> Any:
        return _render(self._compiled, context)


class _Str:
    __slots__ = ("parts",)

    def __init__(self, parts: list[str | Expr]) -> None:
        self.parts = parts


def _compile(value: Any) -> Any:
    if isinstance(value, str):
        parts = _split(value)
        return _Str(parts) if any(isinstance(p, Expr) for p in parts) else value
    if isinstance(value, Mapping):
        return {k: _compile(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_compile(v) for v in value]
    return value


def _has_expr(c: Any) -> bool:
    if isinstance(c, _Str):
        return True
    if isinstance(c, dict):
        return any(_has_expr(v) for v in c.values())
    if isinstance(c, list):
        return any(_has_expr(v) for v in c)
    return False


def _collect(c: Any, out: list[Expr]) -> None:
    if isinstance(c, _Str):
        out.extend(p for p in c.parts if isinstance(p, Expr))
    elif isinstance(c, dict):
        for v in c.values():
            _collect(v, out)
    elif isinstance(c, list):
        for v in c:
            _collect(v, out)


def _render(c: Any, ctx: Mapping[str, Any]) -> Any:
    if isinstance(c, _Str):
        if len(c.parts) == 1 and isinstance(c.parts[0], Expr):
            return evaluate(c.parts[0], ctx)
        out = []
        for p in c.parts:
            if isinstance(p, Expr):
                v = evaluate(p, ctx)
                out.append(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
            else:
                out.append(p)
        return "".join(out)
    if isinstance(c, dict):
        return {k: _render(v, ctx) for k, v in c.items()}
    if isinstance(c, list):
        return [_render(v, ctx) for v in c]
    return c


def compile_template(value: Any) -> Template:
    """Compile every `${expr}` in a JSON value; raise ExprError naming the bad expression."""
    return Template(value, _compile(value))
