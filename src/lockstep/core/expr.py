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

from .canonical import JSONValue
from .exprcheck import ExprLimits, LimitExceeded, Shape, check_shape
from .exprsyntax import from_cel, from_offset
from .timeutil import iso

__all__ = [
    "ALLOWED_ROOTS",
    "ExprError",
    "ExprLimits",
    "Template",
    "compile_expr",
    "compile_template",
    "evaluate",
]

# `item` and `index` are the element and its position inside a for-each body (publishing refuses them
# anywhere else: definition/shapes.py).
ALLOWED_ROOTS = frozenset({"input", "steps", "run", "item", "index"})
_PATH = re.compile(r"^(?:input|steps|run|item|index)(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")
_UNEXPECTED = re.compile(r"unexpected character (.+) at offset (\d+)")
_DASHED = re.compile(r"\bsteps\.([A-Za-z_][A-Za-z0-9_]*(?:-[A-Za-z0-9_]+)+)")
_MACRO_VAR = re.compile(r"\.(?:all|exists|exists_one|map|filter)\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,")


class ExprError(ValueError):
    """An expression that does not compile, or that fails when evaluated (message says which and why).

    `at` is where inside a template the expression is (e.g. `.items[2]`), for the definition's path."""

    def __init__(self, message: str, at: str = "") -> None:
        super().__init__(message)
        self.at = at


# The CEL library is Rust: a bug in it surfaces as pyo3's PanicException, a BaseException that no
# `except Exception` catches. Whatever it raises becomes ExprError; only a user's interrupt goes through.
_PASS_THROUGH = (KeyboardInterrupt, SystemExit, GeneratorExit)
# Size and nesting always; the cost bound needs the tenant's data bounds, which a definition brings.
DEFAULT_LIMITS = ExprLimits(max_cost=None)


@dataclass(frozen=True)
class Expr:
    source: str
    program: Any
    roots: frozenset[str]
    # A plain field path like `input.order.id` is resolved directly: exact (no int/double conversion
    # of big integers) and much cheaper than a CEL evaluation.
    path: tuple[str, ...] | None = None
    shape: Shape | None = None

    @property
    def cost(self) -> int:
        return self.shape.cost if self.shape is not None else 0


def _short(source: str) -> str:
    return source if len(source) <= 80 else source[:60] + f"... ({len(source)} characters)"


def _cel_compile(source: str) -> Any:
    try:
        return cel.compile(source)
    except _PASS_THROUGH:
        raise
    except BaseException as exc:  # the binding raises ValueError with a dotted diagram: reword it
        text = str(exc)
        readable = from_cel(source, text)
        if readable is not None:
            raise ExprError(readable) from None
        first = (text.split("\n", maxsplit=1)[0] or type(exc).__name__)[:300]
        raise ExprError(f"invalid expression `{_short(source)}`: {first}") from None


@lru_cache(maxsize=4096)
def compile_expr(
    source: str, limits: ExprLimits = DEFAULT_LIMITS, roots: frozenset[str] | None = None
) -> Expr:
    """Check an expression's size, nesting and worst-case cost (exprcheck), then compile it with CEL;
    raise ExprError for syntax errors, unknown variables and expressions over a limit. `roots`: the
    variables it may use, when not a run's (an http step's `success` sees only `response`)."""
    if not source.strip():
        raise ExprError("empty expression")
    try:
        shape = check_shape(source, limits)
    except LimitExceeded as exc:
        raise ExprError(f"`{_short(source)}`: {exc}") from None
    except RecursionError:  # the checks bound the parser's recursion; this is a last line of defence
        raise ExprError(f"`{_short(source)}`: nested too deeply: simplify the expression") from None
    except ValueError as exc:
        # Not an expression lockstep can analyse. Its size and nesting were checked before parsing (or
        # it could not even be split into tokens), so the CEL library may word the syntax error.
        if m := _UNEXPECTED.match(str(exc)):
            shown = m.group(1)[1:-1] if len(m.group(1)) == 3 else m.group(1)  # the repr of one character
            raise ExprError(from_offset(source, int(m.group(2)), f"unexpected character `{shown}`")) from None
        _cel_compile(source)
        raise ExprError(
            f"`{_short(source)}`: lockstep cannot bound the cost of this expression ({exc}); "
            f"write it without that construct"
        ) from None
    program = _cel_compile(source)
    # Macros (all, exists, exists_one, map, filter) bind a loop variable that variables() also lists.
    bound = {v for v in _MACRO_VAR.findall(source) if not _used_outside_macros(source, v)}
    free = frozenset(program.variables()) - bound
    unknown = sorted(free - (ALLOWED_ROOTS if roots is None else roots))
    if unknown and roots is not None:
        raise ExprError(
            f"unknown variable {', '.join(unknown)} in `{source}`: this expression may use only "
            + ", ".join(sorted(roots))
        )
    if unknown:
        # `steps.legal-ok.output` is `steps.legal - ok.output` to CEL: name the fix, not just `ok`.
        dashed = _DASHED.search(source)
        hint = (
            f' (`{dashed.group(0)}` subtracts; a step id with `-` is read as steps["{dashed.group(1)}"])'
            if dashed is not None
            else ""
        )
        raise ExprError(
            f"unknown variable {', '.join(unknown)} in `{source}`: "
            f"expressions may use only input, steps.<id>.output and run (and item and index in a "
            f"for_each body){hint}"
        )
    path = tuple(source.strip().split(".")) if _PATH.match(source.strip()) else None
    return Expr(source, program, free, path, shape)


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


def _to_json(value: object) -> JSONValue:
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


def evaluate(expr: Expr, context: Mapping[str, JSONValue]) -> JSONValue:
    """Evaluate; every failure (missing field, type mismatch, division by zero) becomes ExprError."""
    if expr.path is not None:
        value: JSONValue = context
        for i, part in enumerate(expr.path):
            if not isinstance(value, Mapping) or part not in value:
                where = ".".join(expr.path[:i]) or "the context"
                raise ExprError(f"`{expr.source}`: no such field '{part}' in {where}")
            value = value[part]
        return value
    return _execute(expr, bind(context, [expr]))


def bind(context: Mapping[str, JSONValue], exprs: list[Expr]) -> Any:
    """The CEL context for `exprs`, converted once: only the roots they read, and of `steps` only the
    steps they name (converting the whole context on every evaluation is what costs the most)."""
    roots: set[str] = set()
    step_ids: set[str] | None = set()
    for e in exprs:
        roots |= e.roots
        if e.shape is None or e.shape.step_ids is None:
            step_ids = None
        elif step_ids is not None:
            step_ids |= e.shape.step_ids
    narrowed = {k: context[k] for k in roots if k in context}
    steps = narrowed.get("steps")
    if step_ids is not None and isinstance(steps, Mapping):
        narrowed["steps"] = {k: steps[k] for k in step_ids if k in steps}
    bounds = [e.shape.items_bound for e in exprs if e.shape is not None and e.shape.items_bound]
    if bounds:
        oversized = _largest_over(narrowed, min(bounds))
        if oversized:
            return _Unconvertible(oversized)
    try:
        return cel.Context(narrowed)
    except _PASS_THROUGH:
        raise
    except BaseException as exc:
        return _Unconvertible(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")


def _largest_over(value: object, bound: int) -> str:
    """A comprehension's cost was bounded assuming no collection holds more than `bound` elements.
    Arrays are bounded on entry (max_list_items); an object's keys are not, so check them here."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, Mapping | list):
            if len(v) > bound:
                kind = "an object with" if isinstance(v, Mapping) else "a list of"
                return f"{kind} {len(v)} entries; comprehensions here assume at most {bound} (max_list_items)"
            stack.extend(v.values() if isinstance(v, Mapping) else v)
    return ""


@dataclass(frozen=True)
class _Unconvertible:
    """A context the binding could not convert (e.g. nested too deep): every evaluation fails."""

    reason: str


def _execute(expr: Expr, bound: Any) -> JSONValue:
    if isinstance(bound, _Unconvertible):
        raise ExprError(f"`{_short(expr.source)}`: the run's data cannot be evaluated ({bound.reason})")
    try:
        return _to_json(expr.program.execute(bound))
    except _PASS_THROUGH:
        raise
    except KeyError as exc:
        raise ExprError(f"`{_short(expr.source)}`: no such field {exc}") from None
    except BaseException as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ExprError(f"`{_short(expr.source)}`: {first[:300]}") from None


def _split(text: str, limits: ExprLimits) -> list[str | Expr]:
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
            parts.append(compile_expr(text[i + 2 : j], limits))
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

    raw: JSONValue
    _compiled: object  # raw, with each string that holds ${...} compiled

    @property
    def is_constant(self) -> bool:
        return not _has_expr(self._compiled)

    def expressions(self) -> list[Expr]:
        out: list[Expr] = []
        _collect(self._compiled, out)
        return out

    def leaves(self) -> list[tuple[tuple[str | int, ...], list[str | Expr]]]:
        """Every string holding an expression, with where it is in the rendered value (member names
        and indexes from the top) and its parts: literal text and expressions, in order."""
        out: list[tuple[tuple[str | int, ...], list[str | Expr]]] = []
        stack: list[tuple[tuple[str | int, ...], Any]] = [((), self._compiled)]
        while stack:
            at, c = stack.pop()
            if isinstance(c, _Str):
                out.append((at, list(c.parts)))
            elif isinstance(c, dict):
                stack.extend(((*at, k), v) for k, v in c.items())
            elif isinstance(c, list):
                stack.extend(((*at, i), v) for i, v in enumerate(c))
        return out

    def render(self, context: Mapping[str, JSONValue]) -> JSONValue:
        exprs = [e for e in self.expressions() if e.path is None]
        return _render(self._compiled, context, bind(context, exprs) if exprs else None)

    def cost(self) -> int:
        """The worst case of one render: the context is converted once, for all its expressions."""
        shapes = [e.shape for e in self.expressions() if e.shape is not None and e.path is None]
        # Expressions reading the same roots (and steps) share one conversion: charge it once per group.
        conversions: dict[tuple[frozenset[str], frozenset[str] | None], int] = {}
        for s in shapes:
            key = (s.roots, s.step_ids)
            conversions[key] = max(conversions.get(key, 0), s.conversion)
        return sum(s.cost - s.conversion for s in shapes) + sum(conversions.values())


class _Str:
    __slots__ = ("parts",)

    def __init__(self, parts: list[str | Expr]) -> None:
        self.parts = parts


def _compile(value: JSONValue, limits: ExprLimits, at: str) -> object:
    if isinstance(value, str):
        try:
            parts = _split(value, limits)
        except ExprError as exc:
            raise ExprError(str(exc), at) from None
        return _Str(parts) if any(isinstance(p, Expr) for p in parts) else value
    if isinstance(value, Mapping):
        return {k: _compile(v, limits, f"{at}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_compile(v, limits, f"{at}[{i}]") for i, v in enumerate(value)]
    return value


def _has_expr(c: object) -> bool:
    if isinstance(c, _Str):
        return True
    if isinstance(c, dict):
        return any(_has_expr(v) for v in c.values())
    if isinstance(c, list):
        return any(_has_expr(v) for v in c)
    return False


def _collect(c: object, out: list[Expr]) -> None:
    if isinstance(c, _Str):
        out.extend(p for p in c.parts if isinstance(p, Expr))
    elif isinstance(c, dict):
        for v in c.values():
            _collect(v, out)
    elif isinstance(c, list):
        for v in c:
            _collect(v, out)


def _value(expr: Expr, ctx: Mapping[str, JSONValue], bound: Any) -> JSONValue:
    return evaluate(expr, ctx) if expr.path is not None or bound is None else _execute(expr, bound)


def _render(c: object, ctx: Mapping[str, JSONValue], bound: Any) -> JSONValue:
    if isinstance(c, _Str):
        if len(c.parts) == 1 and isinstance(c.parts[0], Expr):
            return _value(c.parts[0], ctx, bound)
        out = []
        for p in c.parts:
            if isinstance(p, Expr):
                v = _value(p, ctx, bound)
                out.append(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
            else:
                out.append(p)
        return "".join(out)
    if isinstance(c, dict):
        return {k: _render(v, ctx, bound) for k, v in c.items()}
    if isinstance(c, list):
        return [_render(v, ctx, bound) for v in c]
    return c


def compile_template(value: JSONValue, limits: ExprLimits = DEFAULT_LIMITS) -> Template:
    """Compile every `${expr}` in a JSON value; raise ExprError naming the bad expression (`at` says
    where in the value it is)."""
    return Template(value, _compile(value, limits, ""))
