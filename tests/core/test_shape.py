"""core/shape.py: the byte scan that guards every JSON request body agrees with a parser on how deep a
document nests (strings full of brackets, quotes and backslashes included), and the measure of a value
reports its size, depth and widest array/object exactly."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lockstep.core.shape import for_view, measure, text_depth_over

TRICKY = st.text(alphabet='[]{}"\\,:a é\n', max_size=6)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | TRICKY,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TRICKY, inner, max_size=4),
    max_leaves=40,
)


def depth(v: Any) -> int:
    if isinstance(v, dict):
        return 1 + max(map(depth, v.values()), default=0)
    if isinstance(v, list):
        return 1 + max(map(depth, v), default=0)
    return 0


def width(v: Any) -> int:
    if isinstance(v, dict):
        return max([len(v), *map(width, v.values())])
    if isinstance(v, list):
        return max([len(v), *map(width, v)])
    return 0


@settings(max_examples=400, deadline=1000)
@given(VALUES, st.booleans(), st.integers(min_value=0, max_value=3))
def test_the_byte_scan_agrees_with_the_parser_on_depth(value: Any, ascii_only: bool, indent: int) -> None:
    """text_depth_over(json text, limit) is True exactly when the parsed value nests deeper than limit."""
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent or None).encode()
    d = depth(value)
    for limit in {max(0, d - 1), d, d + 1}:
        assert text_depth_over(text, limit) == (d > limit), (text, d, limit)


def test_unbalanced_and_hostile_texts_count_as_deep() -> None:
    """Unclosed openings count (a parser nests into them before failing); UTF-16 text is refused."""
    assert text_depth_over(b"[" * 100_000, 66)
    assert text_depth_over(b'{"a": ' * 70, 66)
    assert not text_depth_over(b'{"a": "' + b"[" * 100_000 + b'"}', 1)  # brackets inside a string
    assert text_depth_over('{"a": [1]}'.encode("utf-16"), 66)


@settings(max_examples=300, deadline=1000)
@given(VALUES)
def test_measure_reports_size_depth_and_width_exactly(value: Any) -> None:
    """measure gives the compact JSON size, the nesting depth and the widest array/object."""
    shape = measure(value, "input", max_bytes=1 << 20, max_depth=64, max_width=1000)
    assert shape.size == len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    assert shape.depth == depth(value)
    assert shape.width == width(value)
    assert for_view(value) == value


def test_measure_stops_at_the_first_bound_and_says_where() -> None:
    """A list past max_width is reported with its path; a huge value is not walked past its size."""
    shape = measure({"a": [{"b": list(range(11))}]}, "input", max_bytes=1000, max_depth=8, max_width=10)
    assert (shape.width, shape.width_at) == (11, "input.a[0].b")
    huge = measure({"x": "y" * 5000}, "input", max_bytes=100, max_depth=8, max_width=10)
    assert (huge.size, huge.depth) == (5008, 0)
