"""The client's runs search is one typed filter set: every filter goes out under its query name, and
a filter name the API does not know is refused before any request is sent."""

from __future__ import annotations

from datetime import datetime

import pytest

from lockstep.client import calls


def test_runs_filters_go_out_by_query_name_and_none_is_left_out() -> None:
    """Each given filter is a query parameter, a naive datetime is sent as UTC, None filters are omitted."""
    call = calls.page({"status": "waiting", "key": None, "started_from": datetime(2026, 1, 2)}, 10, None)
    assert call.params == {"status": "waiting", "started_from": "2026-01-02T00:00:00+00:00", "limit": 10}


def test_an_unknown_runs_filter_is_refused_with_the_known_names() -> None:
    """A misspelt filter raises TypeError naming it and the known filters instead of being ignored."""
    with pytest.raises(TypeError, match=r"unknown runs filter\(s\) stauts; known: status, definition"):
        calls.page({"stauts": "waiting"}, 10, None)  # type: ignore[typeddict-unknown-key]
