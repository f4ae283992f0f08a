"""docs/definitions.md stays true for the http step: its example publishes as written and its request
renders as the text describes."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from lockstep.core.definition import HttpStep, parse_definition

DOC = Path(__file__).parents[2] / "docs" / "definitions.md"


def test_the_http_example_publishes_and_renders_as_documented() -> None:
    """The example's charge is an http step; its request has the method, body, auth and key header."""
    text = DOC.read_text().split("\n### http\n", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None
    d = parse_definition({"name": "doc-http", "steps": yaml.safe_load(block.group(1))})
    step = d.step("charge")
    assert isinstance(step, HttpStep)
    assert step.retry.max_attempts == 5
    request = step.input.render({"input": {"order": "o-1", "amount": 12}, "steps": {}, "run": {}})
    assert request["method"] == "POST"
    assert request["body"] == {"amount": 12, "currency": "EUR"}
    assert request["auth"] == {"secret": "payments-api-key", "scheme": "bearer"}
    assert request["headers"]["X-Order"] == "o-1"
    assert request["idempotency_header"] == "Idempotency-Key"
    assert step.idempotency_key is not None
