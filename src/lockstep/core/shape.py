"""How big, deep and wide a JSON value is, measured without recursion (pure; core/limits.py says the bounds).

Three tools: `measure` (a Python value: its compact-JSON size, nesting depth and widest array or object,
with where), `text_depth_over` (JSON bytes, before anything parses them: a scan at C speed), and
`for_view` (a stored value, shown: what no view could serialise becomes a marker, never a 500).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import add, mul, sub

import orjson

from .canonical import JSONValue
from .limits import TENANT_LIMITS, tenant_limit

__all__ = ["Shape", "for_view", "measure", "over_limit", "shape_of", "text_depth_over"]

_CONTAINERS = (dict, list, tuple)


@dataclass(frozen=True)
class Shape:
    """`size` is the compact JSON's bytes. `depth` counts nested arrays/objects (a scalar is 0) and
    `width` is the most elements of one array or members of one object; each with the path to it. A
    measure stops at its first bound exceeded, so a value past a bound reports that bound plus one."""

    size: int
    depth: int = 0
    depth_at: str = ""
    width: int = 0
    width_at: str = ""


def _size(value: object) -> int:
    try:
        return len(orjson.dumps(value))
    except TypeError:  # what orjson refuses (huge integers, non-string keys, 255+ levels)
        try:
            return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
        except RecursionError:
            return -1
        except (TypeError, ValueError):
            return 0  # not JSON at all: the callers' JSON check says so with a better message


def _path(root: str, parts: tuple[str | int, ...]) -> str:
    out = root
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out if len(out) <= 200 else out[:97] + "..." + out[-100:]


def measure(value: object, root: str, *, max_bytes: int, max_depth: int, max_width: int) -> Shape:
    """The shape of `value` (named `root` in paths). The size comes first (orjson, C speed), so a value
    over `max_bytes` is not walked at all; the walk visits each container once and stops at the first
    array/object deeper than `max_depth` or wider than `max_width`."""
    size = _size(value)
    if size < 0:  # too deep for any JSON encoder: deeper than every bound
        return Shape(size=0, depth=max_depth + 1, depth_at=root)
    if size > max_bytes:
        return Shape(size=size)
    deepest, widest = 0, 0
    deepest_at: tuple[str | int, ...] = ()
    widest_at: tuple[str | int, ...] = ()
    stack: list[tuple[object, int, tuple[str | int, ...]]] = [(value, 1, ())]
    while stack:
        v, d, at = stack.pop()
        if not isinstance(v, _CONTAINERS):
            continue
        if d > deepest:
            deepest, deepest_at = d, at
            if d > max_depth:
                break
        if len(v) > widest:
            widest, widest_at = len(v), at
            if widest > max_width:
                break
        items = v.items() if isinstance(v, dict) else enumerate(v)
        stack.extend((c, d + 1, (*at, k)) for k, c in items if isinstance(c, _CONTAINERS))
    return Shape(size, deepest, _path(root, deepest_at), widest, _path(root, widest_at))


def shape_of(value: object, root: str, size_limit: str) -> Shape:
    """`value` measured up to the ceilings: enough to compare with any tenant's limits afterwards (so the
    walk can run outside the transaction that then compares)."""
    return measure(
        value,
        root,
        max_bytes=TENANT_LIMITS[size_limit].ceiling,
        max_depth=TENANT_LIMITS["max_json_depth"].ceiling,
        max_width=TENANT_LIMITS["max_list_items"].ceiling,
    )


def over_limit(
    settings: Mapping[str, object], shape: Shape, size_limit: str
) -> tuple[str, int, int, str] | None:
    """(limit name, found, allowed, where) for the first tenant limit `shape` exceeds, else None."""
    for name, found, at in (
        (size_limit, shape.size, ""),
        ("max_json_depth", shape.depth, shape.depth_at),
        ("max_list_items", shape.width, shape.width_at),
    ):
        allowed = tenant_limit(settings, name)
        if found > allowed:
            return name, found, allowed, at
    return None


# JSON text reduced to its structure: quotes and brackets only (objects folded into arrays).
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_FOLD = bytes.maketrans(b"{}", b"[]")
# Innermost pairs deleted before the depth profile is read: a few passes remove most brackets of any
# text (each pass lowers the peak by exactly one), so few runs are left to read.
_PASSES = 8


def _brackets(data: bytes) -> bytes:
    """The brackets of JSON text that lie outside its strings, at C speed (a regex costs ~0.4 us a
    string). Escapes go first, left to right as a parser reads them (an escaped backslash, then an
    escaped quote), so every quote left delimits a string. Deleting two adjacent quotes keeps every
    other byte inside or outside; what is left splits into pieces whose even ones are outside. Up to
    the first error of an invalid text this agrees with a parser, which recurses no further."""
    unescaped = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    structure = unescaped.translate(_FOLD, _NOT_STRUCTURE).replace(b'""', b"")
    return b"".join(structure.split(b'"')[::2])


def _peak(brackets: bytes) -> int:
    """The deepest nesting of a bracket string (its highest prefix depth), read run by run: with no
    "][" inside, each piece is openings then closings; between pieces the depth goes -1 +1."""
    pieces = brackets.split(b"][")
    opens = list(map(len, map(bytes.rstrip, pieces, repeat(b"]"))))
    nets = map(sub, map(mul, opens, repeat(2)), map(len, pieces))
    return max(map(add, accumulate(nets, initial=0), opens), default=0)


def text_depth_over(data: bytes, limit: int) -> bool:
    """Whether JSON text nests arrays/objects deeper than `limit`, without parsing it: in C-speed
    passes (no Python step per byte or per string). Exact for valid JSON; for an invalid text it may
    say over when the text is within _PASSES levels of the limit (it is refused either way). UTF-8
    only (RFC 8259): in UTF-16/32 a quote byte can hide inside another character, so a NUL byte (never
    in UTF-8 JSON) counts as over."""
    if b"\0" in data:
        return True
    brackets = _brackets(data)
    passes = 0
    while brackets and passes < _PASSES:
        paired = brackets.replace(b"[]", b"")
        if len(paired) == len(brackets):
            break
        brackets, passes = paired, passes + 1
    return passes + _peak(brackets) > limit


VIEW_DEPTH = TENANT_LIMITS["max_json_depth"].ceiling
VIEW_BYTES = max(TENANT_LIMITS[n].ceiling for n in ("max_input_bytes", "max_output_bytes"))
# orjson refuses to nest 255 levels, as pydantic refuses to serialise them (the API's 500): a value that
# orjson encodes inside this many extra arrays fits in any view's envelope (a run list nests values 5
# deep) with room to spare.
_ENVELOPE = 10


def for_view(value: JSONValue) -> JSONValue:
    """`value` as every view (API, UI, CLI) shows it: unchanged if it can be serialised in any view
    (what the limits accept always can); else (stored before the limits existed) with what lies past
    VIEW_DEPTH levels replaced by a string marker, or all of it if larger than VIEW_BYTES. The common
    case costs one orjson encode (C speed: ~0.5 ms for 200 KB)."""
    if not isinstance(value, _CONTAINERS):
        return value
    probe = value
    for _ in range(_ENVELOPE):
        probe = [probe]
    try:
        size = len(orjson.dumps(probe))
    except TypeError:  # too deep, or what orjson cannot encode (huge integers): clip to be sure
        return _clip(value, VIEW_DEPTH)
    if size > VIEW_BYTES:
        return f"[not shown: {size} bytes, more than the {VIEW_BYTES} any view shows]"
    return value


def _clip(value: JSONValue, depth: int) -> JSONValue:
    """A copy of `value` with every array/object at level `depth + 1` replaced by a marker (no recursion)."""
    marker = f"[not shown: nested deeper than {depth} levels]"

    def copy(v: JSONValue, level: int) -> JSONValue:
        if not isinstance(v, _CONTAINERS):
            return v
        if level > depth:
            return marker
        return {} if isinstance(v, dict) else []

    root = copy(value, 1)
    stack = [(value, root, 1)]
    while stack:
        src, dst, level = stack.pop()
        if isinstance(dst, str):
            continue
        items = src.items() if isinstance(src, dict) else enumerate(src)
        for k, c in items:
            child = copy(c, level + 1)
            if isinstance(dst, dict):
                dst[k] = child
            else:
                dst.append(child)
            if isinstance(child, dict | list) and isinstance(c, _CONTAINERS):
                stack.append((c, child, level + 1))
    return root
