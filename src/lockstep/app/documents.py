"""Definition documents from untrusted text: YAML or JSON, bounded while parsing, duplicate keys refused.

A YAML alias is a reference: 464 bytes of seven nested alias levels expand to ten million nodes, and
everything after parsing (validation, the digest, compiling templates) walks the expansion. So the
composer counts, before any Python object is built, every node as what it expands to (an alias counts
the whole subtree it names), and the aliases themselves, like the alias limits of SnakeYAML or the node
limits of other hardened loaders. Duplicate keys are refused: YAML and JSON parsers keep the last one
silently, so what a reviewer reads is not what runs.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode

from ..core.canonical import JSONObject, JSONValue
from ..core.limits import DEFAULT_SERVER_LIMITS, ServerLimits
from ..errors import InvalidInput

__all__ = ["parse_json_document", "parse_yaml_document"]

MERGE_TAG = "tag:yaml.org,2002:merge"


class _Refused(yaml.MarkedYAMLError):
    """A bound or rule of ours, reported with its mark like PyYAML's own errors."""


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader that counts expanded nodes and aliases while composing, and refuses duplicate keys."""

    def __init__(self, stream: str, limits: ServerLimits) -> None:
        super().__init__(stream)
        self.max_aliases = limits["max_yaml_aliases"]
        self.max_nodes = limits["max_yaml_nodes"]
        self.aliases = 0
        self.expanded = 0
        self.sizes: dict[int, int] = {}

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            self.aliases += 1
            if self.aliases > self.max_aliases:
                raise _Refused(
                    problem=f"more than {self.max_aliases} aliases (*name; max_yaml_aliases): "
                    "write the values out",
                    problem_mark=event.start_mark,
                )
            target = self.anchors.get(event.anchor)
            # A target still being composed (a recursive alias) counts as one; validation names it.
            self._grow(self.sizes.get(id(target), 1) if target is not None else 1, event)
            return super().compose_node(parent, index)
        before = self.expanded
        self._grow(1, self.peek_event())  # type: ignore[no-untyped-call]
        node = super().compose_node(parent, index)
        self.sizes[id(node)] = self.expanded - before
        return node

    def _grow(self, nodes: int, event: Any) -> None:
        self.expanded += nodes
        if self.expanded > self.max_nodes:
            raise _Refused(
                problem=f"the document expands to more than {self.max_nodes} values (max_yaml_nodes; aliases "
                f"counted as what they repeat): make it smaller or write repeated parts once",
                problem_mark=event.start_mark,
            )

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Any] = {}
        for key_node, _value in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == MERGE_TAG:
                continue  # keys merged with << may be overridden: that is what merging means
            key = self.construct_object(key_node)
            try:
                first = seen.get(key)
            except TypeError:
                continue
            if first is not None:
                raise _Refused(
                    problem=f"duplicate key {key!r}{{at}} (first at line {first.line + 1}, column "
                    f"{first.column + 1}): keep one of them",
                    problem_mark=key_node.start_mark,
                )
            seen[key] = key_node.start_mark
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def parse_yaml_document(text: str, where: str, limits: ServerLimits = DEFAULT_SERVER_LIMITS) -> JSONValue:
    """The value of a YAML (or JSON) text; InvalidInput naming line and column for any problem."""
    loader = None
    try:
        loader = BoundedLoader(text, limits)  # the reader refuses control characters already here
        return loader.get_single_data()
    except RecursionError:
        raise InvalidInput(f"{where}: nested too deeply to be a definition") from None
    except ValueError as exc:  # e.g. an integer with thousands of digits
        raise InvalidInput(f"{where}: {str(exc)[:200]}") from None
    except _Refused as exc:
        problem = exc.problem or ""
        located = problem.replace("{at}", _at(exc)) if "{at}" in problem else problem + _at(exc)
        raise InvalidInput(f"{where}: {located}") from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InvalidInput(f"{where}: not valid YAML/JSON{_at(exc)}: {problem}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _at(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _pairs(pairs: list[tuple[str, JSONValue]]) -> JSONObject:
    out: JSONObject = {}
    for key, value in pairs:
        if key in out:
            raise InvalidInput(f"the body is not valid JSON: duplicate key {key!r}: keep one of them")
        out[key] = value
    return out


def parse_json_document(text: str) -> JSONValue:
    """The value of a JSON text; InvalidInput for invalid JSON or a duplicate key."""
    try:
        return json.loads(text, object_pairs_hook=_pairs)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, or an integer too long to convert
        raise InvalidInput(f"the body is not valid JSON: {str(exc)[:200]}") from None
