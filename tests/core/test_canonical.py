"""Storage JSON (compact_json/parse_json) against the canonical encoder the hashes use."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockstep.core.canonical import canonical_json, compact_json, parse_json
from lockstep.core.timeutil import iso, parse_iso

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(JSON)
def test_compact_json_reads_back_as_the_same_canonical_document(value):
    """Whatever orjson or the fallback wrote, parse_json gives back a value with the same canonical text."""
    assert canonical_json(parse_json(compact_json(value))) == canonical_json(value)


def test_integers_beyond_64_bits_survive_exactly():
    """orjson would read 2**70 as a float: parse_json must not lose its digits."""
    value = {"big": 2**70, "neg": -(2**80), "ok": 2**62}
    assert parse_json(compact_json(value)) == value
    assert parse_json(canonical_json(value)) == value


def test_lone_surrogates_fall_back_to_the_stdlib_encoder():
    """A string orjson refuses is written exactly as the canonical encoder writes it."""
    assert compact_json({"s": "\ud800"}) == canonical_json({"s": "\ud800"})


def test_parse_json_reads_text_written_by_older_versions():
    """Rows written with the stdlib encoder (sorted keys, exponent floats) read back equal."""
    value = {"b": 1e-07, "a": [1, 2.5, "é"]}
    old = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert parse_json(old) == {"a": [1, 2.5, "é"], "b": 1e-07}


@pytest.mark.parametrize(
    "text", ["2026-11-30T06:31:06.123Z", "2026-01-01T00:00:00.000Z", "1999-12-31T23:59:59.999Z"]
)
def test_iso_round_trips_milliseconds_in_utc(text):
    """iso() is the one timestamp format in events: UTC, milliseconds, a Z."""
    assert iso(parse_iso(text)) == text
    assert iso(parse_iso(text.replace("Z", "+02:00"))) != text  # converted to UTC, not relabelled
