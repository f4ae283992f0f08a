"""JSON pointers (RFC 6901): parse/format round-trip, read and replace without changing the value, overlap."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockstep.core.sensitive import (
    PointerError,
    covers,
    escape,
    exists_at,
    format_pointer,
    get_at,
    minimal,
    overlaps,
    parse_pointer,
    replace_at,
    replace_many,
)

# Member names with the characters a pointer escapes (/ and ~) and lookalikes of escapes.
names = st.text(alphabet=st.sampled_from("ab/~01-_ é"), max_size=4)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=12,
)


def places(value: Any, at: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every place that holds a value, as segments."""
    out = [at]
    if isinstance(value, dict):
        for k, v in value.items():
            out += places(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += places(v, (*at, str(i)))
    return out


def test_the_rfc_examples_read_as_the_rfc_says() -> None:
    """The examples of RFC 6901 section 5 resolve to the values the RFC gives."""
    doc = {"foo": ["bar", "baz"], "": 0, "a/b": 1, "c%d": 2, "e^f": 3, "g|h": 4, "i\\j": 5, 'k"l': 6, " ": 7}
    doc["m~n"] = 8
    assert get_at(doc, "") == doc
    assert get_at(doc, "/foo") == ["bar", "baz"]
    assert get_at(doc, "/foo/0") == "bar"
    assert get_at(doc, "/") == 0
    assert get_at(doc, "/a~1b") == 1
    assert get_at(doc, "/m~0n") == 8
    assert get_at(doc, "/ ") == 7


@pytest.mark.parametrize("bad", ["card", "input.card", "/a~", "/a~2b", "/~x"])
def test_malformed_pointers_are_refused_with_how_to_write_one(bad: str) -> None:
    """Text that is not RFC 6901 raises PointerError, saying what a pointer looks like."""
    with pytest.raises(PointerError) as info:
        parse_pointer(bad)
    assert "/" in str(info.value) or "~" in str(info.value)


@pytest.mark.parametrize("pointer", ["/foo/2", "/foo/-", "/foo/01", "/foo/x", "/bar", "/foo/0/x"])
def test_a_pointer_that_names_nothing_is_absent(pointer: str) -> None:
    """Past the end, `-`, leading zeros, a name on an array, a missing member, inside a scalar: absent."""
    doc = {"foo": ["bar", "baz"]}
    assert not exists_at(doc, pointer)
    with pytest.raises(KeyError):
        get_at(doc, pointer)
    with pytest.raises(KeyError):
        replace_at(doc, pointer, 1)


@given(st.lists(names, max_size=5))
def test_format_then_parse_gives_the_segments_back(segments: list[str]) -> None:
    """Any member names, escaped into a pointer, parse back to themselves."""
    assert parse_pointer(format_pointer(segments)) == tuple(segments)
    assert format_pointer(segments) == "".join("/" + escape(s) for s in segments)


@settings(max_examples=300)
@given(json_values, st.data())
def test_replacing_then_reading_every_pointer_round_trips(value: Any, data: st.DataObject) -> None:
    """Replace the values at some places (none inside another) and read them back: the new values are
    there, everything else is as it was, and the original value is unchanged."""
    before = copy.deepcopy(value)
    every = [format_pointer(p) for p in places(value)]
    chosen = minimal(data.draw(st.lists(st.sampled_from(every), max_size=4)))
    marked = replace_many(value, chosen, lambda p, old: {"$sealed": p, "was": old})
    assert value == before
    for p in chosen:
        assert get_at(marked, p) == {"$sealed": p, "was": get_at(value, p)}
    restored = replace_many(marked, chosen, lambda p, m: m["was"])
    assert restored == value
    for p in every:
        if not any(overlaps(p, q) for q in chosen):
            assert get_at(marked, p) == get_at(value, p)


@given(json_values, st.data())
def test_replace_at_shares_what_is_not_on_the_path(value: Any, data: st.DataObject) -> None:
    """replace_at copies only the containers on the path: a sibling member is the same object."""
    p = data.draw(st.sampled_from([format_pointer(x) for x in places(value)]))
    out = replace_at(value, p, "X")
    assert get_at(out, p) == "X"
    segs = parse_pointer(p)
    if segs and isinstance(value, dict):
        for k, v in value.items():
            if k != segs[0]:
                assert out[k] is v


@given(st.lists(names, max_size=3), st.lists(names, max_size=3))
def test_overlap_is_a_prefix_of_segments_either_way(a: list[str], b: list[str]) -> None:
    """Two pointers overlap exactly when the segments of one begin the other's (never by text alone)."""
    pa, pb = format_pointer(a), format_pointer(b)
    prefix = a == b[: len(a)] or b == a[: len(b)]
    assert overlaps(pa, pb) == prefix
    assert covers(pa, pb) == (a == b[: len(a)])


def test_overlap_does_not_confuse_a_member_with_a_longer_name() -> None:
    """/a covers /a/b and /a~1b is the member "a/b", which /a does not cover; "" covers everything."""
    assert covers("/a", "/a/b")
    assert not covers("/a", "/ab")
    assert not covers("/a", "/a~1b")
    assert covers("", "/x")
    assert not covers("/x", "")


def test_minimal_drops_duplicates_and_covered_pointers() -> None:
    """minimal keeps the outermost pointers, sorted, once each."""
    assert minimal(["/a/b", "/a", "/c", "/a", "/ab"]) == ("/a", "/ab", "/c")
    assert minimal(["/x", ""]) == ("",)


@given(st.lists(st.lists(names, max_size=3).map(format_pointer), max_size=8))
def test_minimal_keeps_exactly_the_pointers_no_other_covers(pointers: list[str]) -> None:
    """minimal == the sorted set of pointers not covered by another one of them."""
    unique = set(pointers)
    expected = sorted(p for p in unique if not any(q != p and covers(q, p) for q in unique))
    assert list(minimal(pointers)) == expected
