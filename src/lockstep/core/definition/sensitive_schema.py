"""Sensitive places of a run's input, read from its `input_schema`: the `x-lockstep-sensitive: true`
annotations (`annotated`), and whether a declared pointer names a place the schema has (`check_pointer`).

Only the keywords that say what a place of the input holds are followed: `properties` (a member),
`prefixItems` (an item), `allOf`/`anyOf`/`oneOf`/`then`/`else`/`dependentSchemas` (the same place),
local `$ref`s (`#/$defs/...`), and the keywords that describe members or items not named one by one
(`additionalProperties`, `patternProperties`, `unevaluatedProperties`, `items`, `contains`, ...): an
annotation under those marks the whole object or array, since no pointer can name "every member". An
annotation anywhere else (under `not`, `if`, `propertyNames`, or in `$defs` no `$ref` reaches) would mark
nothing, so it is refused rather than ignored. Tenant regexes (`patternProperties`) are never run here.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from ..canonical import JSONValue
from ..pointer import PointerError, format_pointer, get_at, parse_pointer

__all__ = ["ANNOTATION", "Place", "annotated", "check_pointer", "lookup", "mentions"]

ANNOTATION = "x-lockstep-sensitive"
# Schema nodes one walk may visit (through $refs a small document can stand for a huge tree).
MAX_VISITS = 20_000

_MEMBER, _SAME, _ANY, _NONE = "member", "same", "any", "none"
_SCALARS = ("string", "number", "integer", "boolean", "null")


def _children(node: Mapping[str, JSONValue]) -> Iterator[tuple[str, JSONValue, str, str]]:
    """(path suffix, subschema, how its place relates to the node's, member name) of every subschema."""
    for kw, how in (("properties", _MEMBER), ("patternProperties", _ANY), ("dependentSchemas", _SAME)):
        sub = node.get(kw)
        if isinstance(sub, Mapping):
            for k, v in sub.items():
                yield f".{kw}.{k}", v, how, str(k)
    for kw in ("$defs", "definitions"):
        sub = node.get(kw)
        if isinstance(sub, Mapping):
            for k, v in sub.items():
                yield f".{kw}.{k}", v, _NONE, ""
    for kw in ("allOf", "anyOf", "oneOf", "prefixItems", "items"):
        sub = node.get(kw)
        if isinstance(sub, list):
            how = _MEMBER if kw == "prefixItems" else _ANY if kw == "items" else _SAME
            for i, v in enumerate(sub):
                yield f".{kw}[{i}]", v, how, str(i)
    for kw, how in (
        ("then", _SAME),
        ("else", _SAME),
        ("items", _ANY),
        ("additionalItems", _ANY),
        ("unevaluatedItems", _ANY),
        ("contains", _ANY),
        ("additionalProperties", _ANY),
        ("unevaluatedProperties", _ANY),
        ("not", _NONE),
        ("if", _NONE),
        ("propertyNames", _NONE),
        ("contentSchema", _NONE),
    ):
        sub = node.get(kw)
        if isinstance(sub, Mapping):
            yield f".{kw}", sub, how, ""


def _ref(root: Mapping[str, JSONValue], node: Mapping[str, JSONValue]) -> tuple[str, JSONValue] | None:
    """The local target of the node's $ref, with its path in the document (None: none, or not local)."""
    ref = node.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#") or (len(ref) > 1 and ref[1] != "/"):
        return None
    try:
        segments = parse_pointer(unquote(ref[1:]))
        target = get_at(root, format_pointer(segments))
    except (PointerError, KeyError):
        return None
    path = "input_schema" + "".join(f".{s}" for s in segments)
    return (path, target) if isinstance(target, Mapping) else None


def mentions(schema: object) -> bool:
    """Whether the annotation appears anywhere in the schema (the walks run only then)."""
    stack = [schema]
    while stack:
        v = stack.pop()
        if isinstance(v, Mapping):
            if ANNOTATION in v:
                return True
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def annotated(schema: Mapping[str, JSONValue]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The places the annotations mark, as (pointer, where the annotation is), and the problems found."""
    marked: list[tuple[str, str]] = []
    problems: list[tuple[str, str]] = []
    seen: set[int] = set()
    visits = 0
    # (node, its path in the document, the place in the input, marks its container, $refs followed)
    stack: list[tuple[JSONValue, str, tuple[str, ...], bool, frozenset[str]]] = [
        (schema, "input_schema", (), False, frozenset())
    ]
    while stack:
        node, path, place, whole, refs = stack.pop()
        if not isinstance(node, Mapping):
            continue
        visits += 1
        if visits > MAX_VISITS:
            return [], [
                (
                    "input_schema",
                    f"too intricate to find its sensitive fields (over {MAX_VISITS:,} schema nodes "
                    f"through $ref): simplify the schema or declare them with sensitive_input",
                )
            ]
        if ANNOTATION in node:
            seen.add(id(node))
            flag = node[ANNOTATION]
            if not isinstance(flag, bool):
                problems.append((f"{path}.{ANNOTATION}", "must be true or false"))
            elif flag:
                marked.append((format_pointer(place), path))
        target = _ref(schema, node)
        if target is not None:
            ref_path, ref_node = target
            if ref_path in refs:  # a recursive schema: anything marked below marks this whole place
                if mentions(ref_node):
                    marked.append((format_pointer(place), path))
            else:
                stack.append((ref_node, ref_path, place, whole, refs | {ref_path}))
        for suffix, sub, how, name in _children(node):
            if how == _NONE:
                continue
            below = (*place, name) if how == _MEMBER and not whole else place
            stack.append((sub, path + suffix, below, whole or how == _ANY, refs))
    problems += _unreached(schema, seen)
    return marked, problems


def _unreached(schema: Mapping[str, JSONValue], seen: set[int]) -> list[tuple[str, str]]:
    """Annotations the walk did not reach: they would mark nothing, which an author never means."""
    out = []
    stack: list[tuple[JSONValue, str]] = [(schema, "input_schema")]
    while stack:
        node, path = stack.pop()
        if not isinstance(node, Mapping):
            continue
        if ANNOTATION in node and id(node) not in seen:
            out.append(
                (
                    f"{path}.{ANNOTATION}",
                    "marks nothing in the input here (under not, if or propertyNames, or in $defs that "
                    "no local $ref uses): put it on the schema of the property that holds the value",
                )
            )
        stack.extend((sub, path + suffix) for suffix, sub, _, _ in _children(node))
    return sorted(out)


def _alternatives(
    root: Mapping[str, JSONValue], nodes: list[JSONValue], budget: list[int]
) -> list[JSONValue]:
    """The nodes and every subschema that describes the same place (allOf..., local $refs)."""
    out, stack, refs = [], list(nodes), set()
    while stack and budget[0] > 0:
        node = stack.pop()
        budget[0] -= 1
        out.append(node)
        if not isinstance(node, Mapping):
            continue
        target = _ref(root, node)
        if target is not None and target[0] not in refs:
            refs.add(target[0])
            stack.append(target[1])
        stack.extend(sub for _, sub, how, _ in _children(node) if how == _SAME)
    return out


@dataclass(frozen=True)
class Place:
    """What input_schema says about one place of the input (see `lookup`)."""

    found: bool  # the schema has the place, or does not say what is there
    depth: int = 0  # when not found: the index of the first segment the schema does not have
    names: frozenset[str] = frozenset()  # the properties declared where the walk stopped
    arrays: bool = False  # the place where it stopped is described as an array
    scalar: str = ""  # ... or as a scalar of this type (string, number...)
    # Not declared, but no additionalProperties says whether other members may exist (JSON Schema's
    # default: they may). check_pointer refuses such a pointer; an expression reading it gets a warning.
    unlisted: bool = False
    schema: JSONValue = None  # when found, and one schema (no alternatives) describes the place


def lookup(
    schema: Mapping[str, JSONValue],
    segments: Sequence[str],
    budget: list[int] | None = None,
    seen: dict[tuple[str, ...], list[JSONValue]] | None = None,
) -> Place:
    """Follow `segments` (member names, or item indexes as digits) through the schema.

    Visits at most MAX_VISITS schema nodes, and at most `budget[0]` (spent in place, so several lookups
    can share it); `seen` keeps, for each prefix of the segments, every schema that describes that
    place, for the lookups that follow. Once the budget is spent the place counts as found (the schema
    is too large to say)."""
    budget = budget if budget is not None else [MAX_VISITS]
    if budget[0] > MAX_VISITS:  # one lookup never visits more than MAX_VISITS
        spent = [MAX_VISITS]
        place = lookup(schema, segments, spent, seen)
        budget[0] -= MAX_VISITS - spent[0]
        return place
    seen = seen if seen is not None else {}
    frontier: list[JSONValue] = [schema]
    for depth, seg in enumerate(segments):
        at = tuple(segments[:depth])
        if at not in seen:  # the place's schemas: the frontier and what says the same (allOf, $ref)
            seen[at] = _alternatives(schema, frontier, budget)
        alternatives = seen[at]
        budget[0] -= len(alternatives)
        nxt: list[JSONValue] = []
        names: set[str] = set()
        arrays = open_ = unlisted = False
        scalar = ""
        for node in alternatives:
            if node is True or not isinstance(node, Mapping):
                open_ = open_ or node is True
                continue
            kinds = node.get("type")
            kinds = [kinds] if isinstance(kinds, str) else kinds if isinstance(kinds, list) else []
            if kinds and all(k in _SCALARS for k in kinds):
                scalar = "/".join(map(str, kinds))
                continue
            props = node.get("properties")
            props = props if isinstance(props, Mapping) else {}
            if seg in props:
                nxt.append(props[seg])
                continue
            names |= set(props)
            extra = node.get("additionalProperties", node.get("unevaluatedProperties"))
            if isinstance(extra, Mapping):
                nxt.append(extra)
            open_ = open_ or extra is True or "patternProperties" in node
            unlisted = unlisted or (bool(props) and extra is None)
            if "items" in node or "prefixItems" in node:
                arrays = True
                prefix = node.get("prefixItems")
                if seg.isdigit() and isinstance(prefix, list) and int(seg) < len(prefix):
                    nxt.append(prefix[int(seg)])
                elif seg.isdigit():
                    items = node.get("items")
                    if isinstance(items, Mapping):
                        nxt.append(items)
                    open_ = open_ or items is True or "items" not in node
            elif not props and extra is None:
                open_ = True  # the schema does not describe what this place holds
        if open_ or budget[0] <= 0:
            return Place(True)
        if not nxt:
            return Place(False, depth, frozenset(names), arrays, scalar, unlisted)
        frontier = nxt
    final = tuple(segments)
    if final not in seen:
        seen[final] = _alternatives(schema, frontier, budget)
    alternatives = seen[final]
    return Place(True, schema=alternatives[0] if len(alternatives) == 1 else None)


def check_pointer(schema: Mapping[str, JSONValue], pointer: str) -> str | None:
    """Why `pointer` names a place the schema does not have (None: it has it, or does not say)."""
    segments = parse_pointer(pointer)
    place = lookup(schema, segments)
    if place.found:
        return None
    where = format_pointer(segments[: place.depth])
    if place.scalar and not place.names and not place.arrays:
        return (
            f"{where or 'the input'} is a {place.scalar} in input_schema: it has no members; "
            f"mark {where or 'the input'} itself"
        )
    return _missing(where, segments[place.depth], set(place.names), place.arrays)


def _missing(where: str, seg: str, names: set[str], arrays: bool) -> str:
    at = f"at {where}" if where else "at the top of the input"
    if arrays and not names:
        return f"{where or 'the input'} is an array in input_schema: name an item by its index ({where}/0)"
    hint = difflib.get_close_matches(seg, sorted(names), n=1)
    if where == "" and seg == "input":
        extra = " (pointers start at the run's input: leave out /input)"
    elif hint:
        extra = f" (did you mean `{where}/{hint[0]}`?)"
    elif names:
        extra = f" (it has: {', '.join(sorted(names)[:10])})"
    else:
        extra = ""
    return (
        f"input_schema has no property `{seg}` {at}{extra}: fix the pointer, or add the property to "
        f"the schema's properties"
    )
