"""The process diagram (ui/diagram.py): built from a definition's flow graph, drawn by Graphviz's `dot`,
with every tenant-written label escaped and a run's marks on its nodes."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from lockstep.core.definition import parse_definition
from lockstep.ui.diagram import Mark, diagram, dot_source

EXAMPLES = Path(__file__).resolve().parents[2] / "src" / "lockstep" / "examples"
SVG = "{http://www.w3.org/2000/svg}"
pytestmark = pytest.mark.skipif(
    shutil.which("dot") is None, reason="needs Graphviz: apt-get install graphviz"
)

ATTACK = """</text></svg><script>alert("x")</script><img src=x onerror='alert(1)'>"""
HOSTILE = {
    "name": "hostile",
    "steps": [
        {
            "id": "route",
            "choice": [
                {"if": 'input.note == "' + ATTACK.replace('"', '\\"') + '"', "next": "boom"},
                {"else": "done"},
            ],
        },
        {"id": "boom", "fail": {"error": ATTACK, "message": "no"}},
        {"id": "done", "succeed": True},
    ],
}


def _svg(text: str) -> ET.Element:
    return ET.fromstring(text)  # noqa: S314 - our own dot's output, parsed to look at it


def _texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def _example(name: str) -> Any:
    return parse_definition(yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text()))


def test_a_label_with_markup_and_quotes_stays_text() -> None:
    """A condition and a fail code carrying </svg><script> and quotes come out as text, not elements."""
    svg = diagram(parse_definition(HOSTILE))
    assert svg is not None
    root = _svg(str(svg))  # well-formed: nothing closed the <text> or the <svg> early
    tags = {el.tag.removeprefix(SVG) for el in root.iter()}
    assert not tags & {"script", "img", "foreignObject", "iframe"}
    texts = _texts(root)
    assert any(t.startswith('input.note == "</text></svg><script>') for t in texts), texts
    assert f"fail {ATTACK}"[:47] in "".join(texts)
    assert "<script>" not in str(svg)
    assert "onerror='" not in str(svg)


def test_a_hostile_label_cannot_become_a_graphviz_html_label() -> None:
    """A label written like Graphviz's <...> HTML labels is quoted as a string in the DOT source."""
    source = dot_source(parse_definition(HOSTILE))
    assert "label=<" not in source
    assert '\\"' in source  # the quotes of the condition are escaped inside a quoted string


def test_choices_parallel_branches_and_for_each_are_drawn() -> None:
    """The contract example shows its branches and its for-each body as boxes, an order its choice."""
    root = _svg(str(diagram(_example("contract-review"))))
    texts = _texts(root)
    for label in ("reviews", "legal", "finance", "legal-review", "lines", "each item", "reserve"):
        assert label in texts, (label, texts)
    clusters = [g for g in root.iter(f"{SVG}g") if "cluster" in (g.get("class") or "")]
    assert len(clusters) == 5  # reviews, its two branches, lines and its body
    order = _texts(_svg(str(diagram(_example("order-fulfilment")))))
    assert "input.qty > 10" in order
    assert "else" in order


def test_a_run_colours_its_steps_and_links_them_to_the_timeline() -> None:
    """Marks become classes (done, current, not taken) and a link to the step's first event."""
    d = _example("order-fulfilment")
    marks = {
        "reserve": Mark("done", "2s", "ev-3"),
        "charge": Mark("current", "1s so far", "ev-7"),
        "cooling-off": Mark("not-taken"),
    }
    root = _svg(str(diagram(d, marks)))
    by_step = {
        _texts(g)[0]: g.get("class") or ""
        for g in root.iter(f"{SVG}g")
        if "node" in (g.get("class") or "").split()
    }
    assert "st-done" in by_step["reserve"]
    assert "st-current" in by_step["charge"]
    assert "st-not-taken" in by_step["cooling-off"]
    assert "st-pending" in by_step["ship"]
    links = [a.get("{http://www.w3.org/1999/xlink}href") for a in root.iter(f"{SVG}a")]
    assert "#ev-3" in links
    assert "#ev-7" in links
    edges = [g.get("class") or "" for g in root.iter(f"{SVG}g") if "edge" in (g.get("class") or "")]
    assert any("taken" in e.split() for e in edges)
    assert any("untaken" in e for e in edges)
