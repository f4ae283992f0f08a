"""Browser test of the runs list's input-field filter (issue 21): typed in the search form, kept in the
URL, answered by the server, and a hostile filter refused with a message; against a real
`lockstep serve --example` in headless Chromium."""

from __future__ import annotations

import re
import shutil
from typing import Any
from urllib.parse import quote

import pytest
import ui_fixtures as fx  # tests/e2e has no __init__.py: pytest puts this folder on sys.path
from test_ops_bulk_browser import _serious
from test_ops_ui_browser import publish, start
from test_ui_browser import listed_run_ids, login
from ui_fixtures import Server

browser = fx.browser
ui_server = fx.ui_server
new_context = fx.new_context
page = fx.page

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz: apt-get install graphviz"),
]

HOLD = {"name": "e2e-input-filter", "steps": [{"id": "pause", "wait": "1h"}]}


def test_the_runs_list_filters_on_an_input_field(ui_server: Server, page: Any) -> None:
    """`customer = "ACME"` lists exactly the ACME runs (nested fields too), the URL keeps the filter, and
    the page passes axe-core."""
    publish(ui_server, HOLD)
    acme = {
        start(ui_server, HOLD["name"], {"customer": "ACME", "a": {"city": "Köln"}}, f"e2e-in-{i}")
        for i in range(3)
    }
    other = start(ui_server, HOLD["name"], {"customer": "Globex", "a": {"city": "Bonn"}}, "e2e-in-x")
    login(page)
    form = page.locator("form.filters")
    form.get_by_label("Input field").fill('customer = "ACME"')
    form.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"input=customer"))
    assert listed_run_ids(page) == acme
    assert form.get_by_label("Input field").input_value() == 'customer = "ACME"'
    assert _serious(page) == []
    page.goto("/ui/?input=" + quote("input.a.city = Bonn"))
    assert listed_run_ids(page) == {other}


def test_a_hostile_input_filter_is_refused_with_a_message(ui_server: Server, page: Any) -> None:
    """Too deep, a field name with quotes, a value past the bound: 400 with what is wrong and how to
    write it, and no run listed."""
    login(page)
    for text, said in (
        (".".join("a" * 6) + " = x", "at most 5 levels"),
        ('cust"omer = x', "is not a field name"),
        ("customer = " + "A" * 201, "longer than 200 characters"),
        ("customer ACME", "no `=`"),
    ):
        resp = page.goto("/ui/?input=" + quote(text))
        assert resp is not None
        assert resp.status == 400, text
        assert said in page.locator("[role=alert]").inner_text()
        assert listed_run_ids(page) == set()
