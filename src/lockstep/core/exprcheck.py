"""Static checks of a CEL expression BEFORE the CEL library sees it: size, nesting and worst-case cost.

The CEL library (Rust) recurses once per level of the expression tree, both when it parses and when it
evaluates, and a deep enough tree overflows the thread's stack (a segfault: the whole server dies). Its
comprehensions (`map`, `filter`) copy their accumulator on every iteration, so their cost is quadratic
in the list length. So every expression is tokenized and parsed here first, by code that cannot
overflow (a linear scan, then a parser whose recursion is bounded by the nesting checked by the scan),
and refused unless its size, nesting and worst-case cost are within `ExprLimits`.

Measured on the reference machine (2 cores, Python 3.11, common-expression-language 0.10, 8 MiB thread
stacks; docs/definitions.md has the cost measurements):
- `1 + 1 + ...` compiles up to ~20,000 terms and segfaults when EVALUATED from ~15,000 (from ~1,000 on a
  512 KiB thread stack); member chains `a.b.c...` segfault from ~30,000 (~1,000 on 512 KiB).
- the parser refuses more than ~96 nested brackets itself, but on a 512 KiB stack it overflows from ~70.
- 100,000 nested brackets raise a PanicException (a BaseException) from the parser.
Hence the defaults: 32 brackets and 200 tree levels, far below every threshold measured.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from .exprparse import BINARY, MACROS, OPEN, RAW_STR, Node, Parser, tokens
from .limits import SERVER_LIMITS, TENANT_LIMITS, ServerLimits, tenant_limit

__all__ = [
    "STORED_EXPR_LIMITS",
    "ExprLimits",
    "LimitExceeded",
    "Shape",
    "check_shape",
    "expression_limits",
    "publish_limits",
]


@dataclass(frozen=True)
class ExprLimits:
    """The bounds an expression is checked against, and the bounds of the data it may run on."""

    max_length: int = SERVER_LIMITS["max_expression_length"].default
    max_nesting: int = SERVER_LIMITS["max_expression_nesting"].default
    max_depth: int = SERVER_LIMITS["max_expression_depth"].default
    max_macro_nesting: int = SERVER_LIMITS["max_macro_nesting"].default
    # None: no cost bound (definitions stored before the bound existed must keep running).
    max_cost: int | None = SERVER_LIMITS["max_expression_cost"].default
    list_items: int = TENANT_LIMITS["max_list_items"].default
    input_bytes: int = TENANT_LIMITS["max_input_bytes"].default
    output_bytes: int = TENANT_LIMITS["max_output_bytes"].default
    step_outputs: int = 20  # how many step outputs a context may hold (the definition's step count)


# Stored definitions compiled once already: they get the crash-safety ceilings, and no cost bound.
STORED_EXPR_LIMITS = ExprLimits(
    max_length=SERVER_LIMITS["max_expression_length"].ceiling,
    max_nesting=SERVER_LIMITS["max_expression_nesting"].ceiling,
    max_depth=SERVER_LIMITS["max_expression_depth"].ceiling,
    max_macro_nesting=SERVER_LIMITS["max_macro_nesting"].ceiling,
    max_cost=None,
    # Runs evaluate the stored parse: objects iterated by a comprehension get the largest list bound
    # any tenant may set (arrays are bounded on entry by the tenant's own).
    list_items=TENANT_LIMITS["max_list_items"].ceiling,
)


def publish_limits(server: ServerLimits) -> ExprLimits:
    """The bounds a published expression is checked against, as this server is configured."""
    return ExprLimits(
        max_length=server["max_expression_length"],
        max_nesting=server["max_expression_nesting"],
        max_depth=server["max_expression_depth"],
        max_macro_nesting=server["max_macro_nesting"],
        max_cost=server["max_expression_cost"],
    )


def expression_limits(base: ExprLimits, settings: Mapping[str, object]) -> ExprLimits:
    """`base` on a tenant's data bounds (its settings of max_list_items, max_input_bytes...)."""
    return replace(
        base,
        list_items=tenant_limit(settings, "max_list_items"),
        input_bytes=tenant_limit(settings, "max_input_bytes"),
        output_bytes=tenant_limit(settings, "max_output_bytes"),
    )


class LimitExceeded(ValueError):
    """An expression over one of the limits; the message names the limit, the value and the bound."""


def _scan(toks: list[tuple[str, str, int]], limits: ExprLimits) -> None:
    """Linear bounds on bracket nesting and tree depth, before anything recurses.

    Tree depth is over-estimated as: open brackets, plus every operator and member access since the
    start of each enclosing bracket's current element (a chain `a + b + c` is a left-deep tree). The
    whole text is scanned so that the error gives the real value, not just the first level over."""
    frames = [0]
    nesting = depth = 0
    nesting_at = depth_at = -1
    for _kind, text, offset in toks:
        if text in OPEN:
            frames[-1] += 1
            frames.append(0)
        elif text in (")", "]", "}"):
            if len(frames) > 1:
                frames.pop()
        elif text == ",":
            frames[-1] = 0
        elif text in BINARY or text in ("!", ".", ".?", "in"):
            frames[-1] += 1
        nesting = max(nesting, len(frames) - 1)
        depth = max(depth, sum(frames) + len(frames) - 1)
        if nesting > limits.max_nesting and nesting_at < 0:
            nesting_at = offset
        if depth > limits.max_depth and depth_at < 0:
            depth_at = offset
    if nesting_at >= 0:
        raise LimitExceeded(
            f"brackets nested {nesting} deep (over from offset {nesting_at}); the limit is "
            f"{limits.max_nesting} (max_expression_nesting): split the expression or simplify it"
        )
    if depth_at >= 0:
        raise LimitExceeded(
            f"expression tree {depth} levels deep (over from offset {depth_at}; each operator of a "
            f"chain, member access and bracket adds one); the limit is {limits.max_depth} "
            f"(max_expression_depth): use `in [...]`, or split it into several steps"
        )


# --- the cost bound ---------------------------------------------------------------------------------
# One unit is about 60 ns on the reference machine (one list element copied by a comprehension's
# accumulator). The rates below were measured there (docs/definitions.md, "Limits") and rounded up.
NODE = 4  # evaluating one node once
CONVERT_BYTES = 4  # converting the Python context into CEL values, once per evaluation or template
COPY_BYTES = 32  # deep copies: `+` on strings and lists, comprehension accumulators
SCAN_BYTES = 256  # comparisons, contains/startsWith/endsWith, `in`
REGEX_BYTES, REGEX_CALL = 16, 200  # `matches` compiles its pattern on every call
REGEX_STATE = 8  # per state of a literal pattern's automaton (see _regex_cost)
REGEX_DYNAMIC = 4_000_000  # a pattern from the data: its compile time is unbounded, so over any budget
SCAN_OPS = {"==", "!=", "<", "<=", ">", ">=", "in"}
SCAN_CALLS = {"contains", "startsWith", "endsWith", "string", "bytes", "size", "int", "double", "uint"}


@dataclass(frozen=True)
class _Value:
    """What the cost of an operation on a value depends on: its elements and its size in bytes."""

    cost: int
    items: int = 0
    nbytes: int = 8


@dataclass(frozen=True)
class Shape:
    """The result of the static check: tree facts, the worst-case cost, and which steps it reads."""

    macro_nesting: int
    cost: int  # the worst case of one evaluation, conversion of its context included
    conversion: int  # of that, converting the context (a template converts it once for all its parts)
    roots: frozenset[str]
    # Step ids read as steps.<id> / steps['<id>']; None when `steps` is read in any other way.
    step_ids: frozenset[str] | None
    # The collection size the cost assumed for comprehensions (None: no comprehension, or no bound).
    # Lists are bounded on entry; objects are checked when the context is bound (see expr.bind).
    items_bound: int | None = None


class _Coster:
    def __init__(self, limits: ExprLimits) -> None:
        self.lim = limits
        self.roots: set[str] = set()
        self.max_nesting = 0
        self.step_ids: set[str] | None = set()

    def value(self, node: Node, scope: dict[str, _Value], nesting: int) -> _Value:
        kind = node[0]
        if kind == "lit":
            return _Value(NODE, node[1], node[2])
        if kind == "ident":
            bound = scope.get(node[1])
            if bound is not None:
                return bound
            if node[1] == "steps":
                self.step_ids = None
            return self.context(node[1])
        if kind in ("select", "index"):
            if node[1] == ("ident", "steps") and "steps" not in scope:
                key = node[2] if kind == "select" else _string_literal(node[2])
                if key is not None and self.step_ids is not None:
                    self.step_ids.add(key)
                    return self.context("output")
            target = self.value(node[1], scope, nesting)
            key_cost = self.value(node[2], scope, nesting).cost if kind == "index" else 0
            return _Value(target.cost + key_cost + NODE, target.items, target.nbytes)
        if kind == "call":
            return self.call(node, scope, nesting)
        if kind == "list":
            parts = [self.value(n, scope, nesting) for n in node[1]]
            return _Value(NODE + sum(p.cost for p in parts), len(parts), 8 + sum(p.nbytes for p in parts))
        if kind == "map":
            parts = [self.value(n, scope, nesting) for pair in node[1] for n in pair]
            return _Value(
                NODE + sum(p.cost for p in parts), len(parts) // 2, 8 + sum(p.nbytes for p in parts)
            )
        if kind == "cond":
            parts = [self.value(n, scope, nesting) for n in node[1:]]
            return _Value(
                NODE + sum(p.cost for p in parts),
                max(p.items for p in parts),
                max(p.nbytes for p in parts),
            )
        return self.op(node[1], [self.value(n, scope, nesting) for n in node[2]])

    def context(self, root: str) -> _Value:
        """A value read from the run's context: any list holds at most max_list_items elements."""
        self.roots.add("steps" if root == "output" else root)
        nbytes = self.lim.output_bytes if root in ("steps", "output") else self.lim.input_bytes
        if root == "steps":
            nbytes *= self.lim.step_outputs
        return _Value(NODE, self.lim.list_items, nbytes)

    def op(self, op: str, args: list[_Value]) -> _Value:
        cost = NODE + sum(a.cost for a in args)
        if op == "+":
            size = sum(a.nbytes for a in args)
            return _Value(cost + size // COPY_BYTES, sum(a.items for a in args), size)
        if op in SCAN_OPS:
            cost += sum(a.nbytes for a in args) // SCAN_BYTES
            if op == "in":
                cost += NODE * args[-1].items
        return _Value(cost)

    def call(self, node: Node, scope: dict[str, _Value], nesting: int) -> _Value:
        _, name, target, args = node
        if target is not None and name in MACROS and len(args) in (2, 3) and args[0][0] == "ident":
            return self.macro(name, target, args[0][1], args[1:], scope, nesting)
        values = [self.value(n, scope, nesting) for n in ([target] if target is not None else []) + args]
        cost = NODE + sum(v.cost for v in values)
        size = sum(v.nbytes for v in values)
        if name == "has":
            return _Value(cost)
        if name == "matches":
            pattern = args[0] if target is not None else args[-1] if args else ("lit", 0, 0)
            return _Value(cost + _regex_cost(pattern) + size // REGEX_BYTES)
        if name in SCAN_CALLS:
            return _Value(cost + size // SCAN_BYTES, 0, size if name in ("string", "bytes") else 8)
        # Anything else (timestamps, durations, has, type conversions...): a copy of its arguments.
        return _Value(cost + size // COPY_BYTES, max((v.items for v in values), default=0), size)

    def macro(
        self, name: str, target: Node, var: str, body: list[Node], scope: dict[str, _Value], nesting: int
    ) -> _Value:
        """`list.exists(x, p)`, ..., and `list.map(x, p, t)` (filter then transform)."""
        nesting += 1
        self.max_nesting = max(self.max_nesting, nesting)
        over = self.value(target, scope, nesting - 1)
        n = max(over.items, 1)
        # Each element's share of the range's bytes: summed over the iterations it is the whole.
        element = _Value(NODE, self.lim.list_items, max(over.nbytes // n, 8))
        inner = {**scope, var: element}
        parts = [self.value(b, inner, nesting) for b in body]
        each = parts[-1]
        cost = over.cost + n * (sum(p.cost for p in parts) + NODE)
        if name in ("map", "filter"):
            kept = each.nbytes if name == "map" else element.nbytes
            # The accumulator is copied on every iteration: quadratic in the number of elements.
            cost += n * n // 2 * (1 + kept // COPY_BYTES)
            return _Value(cost, n, 8 + n * kept)
        return _Value(cost)


def _regex_cost(pattern: Node) -> int:
    """`matches` compiles its pattern on every call. A pattern from the data may be anything: 14 bytes
    of `(\\w{100}){100}` take 190 ms to be refused. A literal is charged by the size of the automaton its
    counted repetitions build (measured: `((a{50}){50}){50}`, 125,000 states, 63 ms)."""
    if pattern[0] != "lit" or len(pattern) < 5:
        return REGEX_DYNAMIC
    text = str(pattern[4])
    if not RAW_STR.match(text):
        text = text.replace("\\\\", "\\")  # "\\w" in a CEL string is the regex \w
    return REGEX_CALL + REGEX_STATE * _automaton_size(text)


def _automaton_size(text: str) -> int:
    """A rough upper bound on the states of a regex: atoms are 1 (a Perl class or `.` is 64: Unicode
    classes are large), `{n,m}` multiplies the atom or group before it by its bound."""
    stack: list[int] = [0]
    last = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            last = 64 if text[i + 1] in "wWdDsSpP" else 1
            stack[-1] += last
            i += 2
            continue
        if ch == "(":
            stack.append(0)
        elif ch == ")" and len(stack) > 1:
            last = max(stack.pop(), 1)
            stack[-1] += last
        elif ch == "{":
            end = text.find("}", i)
            bounds = re.findall(r"\d+", text[i:end]) if end > 0 else []
            if bounds:
                times = min(max(int(b) for b in bounds), 100_000)
                stack[-1] += last * (times - 1)
                last *= times
                i = end + 1
                continue
            stack[-1] += 1
        elif ch == "[":
            end = text.find("]", i + 2)
            last = 8
            stack[-1] += last
            i = end + 1 if end > 0 else len(text)
            continue
        else:
            last = 64 if ch == "." else 1
            stack[-1] += last
        i += 1
    return sum(stack)


def _string_literal(node: Node) -> str | None:
    """The id in steps['id'] (how an id with a dash is read), else None."""
    return node[3] if node[0] == "lit" and len(node) > 3 else None


def check_shape(source: str, limits: ExprLimits) -> Shape:
    """Check size and nesting, then bound the cost; raise LimitExceeded naming the limit it is over.

    Raise ValueError (not LimitExceeded) for text that is not an expression: the caller lets the
    CEL library word the syntax error, which is safe once the size and nesting checks passed."""
    if len(source) > limits.max_length:
        raise LimitExceeded(
            f"expression is {len(source)} characters; the limit is {limits.max_length} "
            f"(max_expression_length): "
            f"move the logic into an activity or split it into several steps"
        )
    toks = tokens(source)
    _scan(toks, limits)
    tree = Parser(toks).parse()
    coster = _Coster(limits)
    total = coster.value(tree, {}, 0)
    roots = frozenset(coster.roots)
    if coster.max_nesting > limits.max_macro_nesting:
        raise LimitExceeded(
            f"comprehensions (all, exists, exists_one, map, filter) nested {coster.max_nesting} deep; "
            f"the limit is {limits.max_macro_nesting} (max_macro_nesting): do the inner one in an activity"
        )
    step_ids = frozenset(coster.step_ids) if coster.step_ids is not None else None
    if step_ids is not None and "steps" in roots:
        narrowed = len(step_ids)
    else:
        narrowed = limits.step_outputs if "steps" in roots else 0
    conversion = _conversion(roots, narrowed, limits)
    cost = total.cost + conversion
    if limits.max_cost is not None and cost > limits.max_cost:
        raise LimitExceeded(
            f"worst-case cost {cost:,} exceeds the limit of {limits.max_cost:,} (max_expression_cost; "
            f"with lists of "
            f"{limits.list_items} items and inputs of {limits.input_bytes} bytes): "
            f"comprehensions over comprehensions, map/filter over long lists and string functions "
            f"inside comprehensions cost the most; do such work in an activity"
        )
    bound = limits.list_items if coster.max_nesting else None
    return Shape(coster.max_nesting, cost, conversion, roots, step_ids, bound)


def _conversion(roots: frozenset[str], step_outputs: int, limits: ExprLimits) -> int:
    """The cost of converting the context the expression reads (only its roots, only its steps)."""
    nbytes = 1024 if "run" in roots else 0
    if "input" in roots:
        nbytes += limits.input_bytes
    if "item" in roots:  # an element of a for-each's list: from the input or a step's output
        nbytes += max(limits.input_bytes, limits.output_bytes)
    nbytes += step_outputs * limits.output_bytes
    return nbytes // CONVERT_BYTES
