"""The pure helpers behind the UI's pages: the runs search's filters, the side-by-side diff and the start
form's fields from an input schema."""

from __future__ import annotations

import pytest

from lockstep.app.search import Filters
from lockstep.errors import InvalidInput
from lockstep.ui.definitions import input_fields, side_by_side


def test_filters_become_a_store_query_and_a_link() -> None:
    """Typed filters map to the query (times as stored ISO, UTC); empty ones stay out of the link."""
    f = Filters(status="waiting", run="01A2", key=" k-1 ", version="2", since="2026-01-31T09:30")
    q = f.query()
    assert (q.status, q.run_prefix, q.start_key, q.version) == ("waiting", "01a2", "k-1", 2)
    assert q.started_from == "2026-01-31T09:30:00.000Z"
    assert q.started_to is None
    assert f.link(cursor="abc") == {
        "status": "waiting",
        "run": "01A2",
        "key": " k-1 ",
        "version": "2",
        "since": "2026-01-31T09:30",
        "cursor": "abc",
    }
    assert not Filters().any()


@pytest.mark.parametrize(
    ("f", "says"),
    [
        (Filters(run="xyz"), "lowercase hex"),
        (Filters(status="sleeping"), "is not one of"),
        (Filters(waiting="godot"), "is not one of"),
        (Filters(version="v2"), "not a version number"),
        (Filters(until="tomorrow"), "2026-01-31T09:30"),
    ],
)
def test_a_bad_filter_says_what_to_write(f: Filters, says: str) -> None:
    """Each malformed filter is refused with a sentence naming the filter and the form it takes."""
    with pytest.raises(InvalidInput, match=says):
        f.query()


def test_the_diff_pairs_changed_lines_and_leaves_out_far_unchanged_ones() -> None:
    """A change is a row with both sides; lines far from any change are one gap row."""
    old = "\n".join(f"line {i}" for i in range(20))
    new = old.replace("line 10", "line ten") + "\nline 20"
    rows = side_by_side(old, new)
    assert ("changed", "11", "line 10", "11", "line ten") in rows
    assert ("added", "", "", "21", "line 20") in rows
    assert rows[0][0] == "same"
    assert ("gap", "", "…", "", "…") in rows
    assert len(rows) < 20


def test_start_form_fields_follow_the_schema() -> None:
    """Required properties first, scalars by type, anything else as JSON; no properties, no fields."""
    schema = {
        "type": "object",
        "required": ["po"],
        "properties": {
            "note": {"type": "string", "description": "free text"},
            "po": {"type": "string"},
            "amount": {"type": "number"},
            "lines": {"type": "array"},
            "rush": {"type": "boolean"},
            "tier": {"type": "string", "enum": ["a", "b"]},
        },
    }
    fields = input_fields(schema)
    assert [(f["name"], f["kind"], f["required"]) for f in fields] == [
        ("po", "string", True),
        ("note", "string", False),
        ("amount", "number", False),
        ("lines", "json", False),
        ("rush", "boolean", False),
        ("tier", "string", False),
    ]
    assert fields[1]["description"] == "free text"
    assert fields[-1]["enum"] == ["a", "b"]
    assert input_fields(None) == []
    assert input_fields({"type": "object"}) == []
