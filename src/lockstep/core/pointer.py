"""JSON pointers (RFC 6901): parse, format, read, replace, and whether two of them overlap.

A pointer names one place in a JSON value: `""` is the whole value, `/card/number` the member `number`
of the member `card`; `~1` stands for `/` and `~0` for `~` inside a member name. On an array a segment
is an index (`0`, or digits without a leading zero); `-` (past the end) names nothing that exists.

Values are never changed in place: `replace_at` copies the objects and arrays on the path and shares
everything else, so a value read from an event or a state stays as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial

from .canonical import JSONValue

__all__ = [
    "PointerError",
    "covers",
    "escape",
    "exists_at",
    "format_pointer",
    "get_at",
    "join",
    "minimal",
    "overlaps",
    "parse_pointer",
    "replace_at",
    "replace_many",
]


class PointerError(ValueError):
    """Text that is not a JSON pointer (the message says what is wrong and how to write it)."""


def escape(segment: str) -> str:
    """One member name as a pointer segment: `~` as `~0`, `/` as `~1`."""
    return segment.replace("~", "~0").replace("/", "~1")


def format_pointer(segments: Iterable[str | int]) -> str:
    """The pointer of a path of member names and array indexes (`("card", 0)` -> `/card/0`)."""
    return "".join("/" + escape(str(s)) for s in segments)


def join(base: str, pointer: str) -> str:
    """`pointer` (relative to the value at `base`) as a pointer from the root: join("/a", "/b") == "/a/b"."""
    return base + pointer


def parse_pointer(pointer: str) -> tuple[str, ...]:
    """The unescaped segments of a pointer; raise PointerError unless it is well-formed RFC 6901."""
    if not isinstance(pointer, str):
        raise PointerError(f"a JSON pointer is a string such as /card, not {type(pointer).__name__}")
    if pointer == "":
        return ()
    if not pointer.startswith("/"):
        raise PointerError("a JSON pointer is empty (the whole value) or starts with /, e.g. /card/number")
    out = []
    for raw in pointer[1:].split("/"):
        i = raw.find("~")
        while i >= 0:
            if raw[i + 1 : i + 2] not in ("0", "1"):
                raise PointerError("~ must be followed by 0 (for ~) or 1 (for /) in a JSON pointer")
            i = raw.find("~", i + 2)
        out.append(raw.replace("~1", "/").replace("~0", "~"))
    return tuple(out)


def _index(segment: str, size: int) -> int | None:
    """The array index a segment names, if it is one and within the array."""
    if not segment.isascii() or not segment.isdigit() or (len(segment) > 1 and segment[0] == "0"):
        return None
    i = int(segment)
    return i if i < size else None


def _child(value: JSONValue, segment: str) -> tuple[bool, JSONValue]:
    if isinstance(value, Mapping):
        return (True, value[segment]) if segment in value else (False, None)
    if isinstance(value, list):
        i = _index(segment, len(value))
        return (True, value[i]) if i is not None else (False, None)
    return False, None


def get_at(value: JSONValue, pointer: str) -> JSONValue:
    """The value at `pointer`; raise KeyError when nothing is there (PointerError when malformed)."""
    for segment in parse_pointer(pointer):
        found, value = _child(value, segment)
        if not found:
            raise KeyError(pointer)
    return value


def exists_at(value: JSONValue, pointer: str) -> bool:
    """Whether `pointer` names a place that holds a value (an explicit null counts)."""
    for segment in parse_pointer(pointer):
        found, value = _child(value, segment)
        if not found:
            return False
    return True


def _replaced(
    value: JSONValue, segments: tuple[str, ...], make: Callable[[JSONValue], JSONValue]
) -> JSONValue:
    if not segments:
        return make(value)
    head, rest = segments[0], segments[1:]
    if isinstance(value, Mapping) and head in value:
        return {**value, head: _replaced(value[head], rest, make)}
    if isinstance(value, list):
        i = _index(head, len(value))
        if i is not None:
            return [*value[:i], _replaced(value[i], rest, make), *value[i + 1 :]]
    raise KeyError(format_pointer(segments))


def replace_at(value: JSONValue, pointer: str, new: JSONValue) -> JSONValue:
    """A copy of `value` with the value at `pointer` replaced by `new` (KeyError when nothing is there);
    `value` itself is not changed, and what is not on the path is shared, not copied."""
    return _replaced(value, parse_pointer(pointer), lambda _old: new)


def replace_many(
    value: JSONValue, pointers: Iterable[str], make: Callable[[str, JSONValue], JSONValue]
) -> JSONValue:
    """`value` with the value at each pointer replaced by make(pointer, old value), in order; a pointer
    that names nothing is skipped. Give pointers none of which is inside another (see `minimal`)."""
    for p in pointers:
        try:
            value = _replaced(value, parse_pointer(p), partial(make, p))
        except KeyError:
            continue
    return value


def covers(outer: str, inner: str) -> bool:
    """Whether the place `inner` is `outer` or inside it (by segments: /a covers /a/b, not /ab)."""
    return inner == outer or inner.startswith(outer + "/") or outer == ""


def overlaps(a: str, b: str) -> bool:
    """Whether two places share a value: one of them is the other or inside it."""
    return covers(a, b) or covers(b, a)


def minimal(pointers: Iterable[str]) -> tuple[str, ...]:
    """The pointers, sorted and without duplicates or any that another one covers."""
    kept: set[str] = set()
    out: list[str] = []
    for p in sorted(set(pointers), key=len):  # a pointer is longer than every one that covers it
        if "" in kept:
            break
        # The pointers that could cover p are its prefixes at a segment boundary.
        if not any(p[:i] in kept for i, ch in enumerate(p) if ch == "/" and i > 0):
            kept.add(p)
            out.append(p)
    return tuple(sorted(out))
