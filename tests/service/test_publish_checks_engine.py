"""The publish-time checks through the Python API (`Engine.publish`): a refusal is InvalidInput with the
same text as the CLI and the API, warnings come back as [{path, message}], and YAML given as text or as
a file refuses duplicate keys with the line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lockstep.engine import Engine
from lockstep.errors import InvalidInput

YAML = """\
name: nap
steps:
  - id: a
    wait: 1h
  - id: b
    succeed: {output: "${steps.a.status}"}
"""


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    e = Engine.open(f"sqlite:///{tmp_path}/db.sqlite")
    try:
        yield e
    finally:
        e.close()


def test_publish_returns_its_warnings(engine: Engine) -> None:
    """A step nothing leads to is accepted, and the result says so with its path."""
    out = engine.publish("name: nap\nsteps:\n  - {id: a, wait: 1h, next: end}\n  - {id: orphan, wait: 1h}\n")
    assert out["version"] == 1
    assert out["warnings"] == [
        {"path": "steps[1](orphan)", "message": "no path from the first step `a` leads here: it never runs"}
    ]
    assert engine.publish(YAML)["warnings"] == []


def test_a_refusal_is_invalid_input_with_the_path_and_the_fix(engine: Engine) -> None:
    """`steps.c` names no step: InvalidInput, the same one line the CLI prints."""
    with pytest.raises(InvalidInput) as info:
        engine.publish(YAML.replace("steps.a.status", "steps.c.status"))
    assert str(info.value) == (
        "invalid definition: steps[1](b).succeed.output: `steps.c`: no step `c`; the steps are a, b"
    )


@pytest.mark.parametrize("as_file", [False, True])
def test_duplicate_keys_in_yaml_text_or_file_are_refused(
    engine: Engine, tmp_path: Path, as_file: bool
) -> None:
    """Two `wait:` keys in one step are refused with the key and both lines, whether the YAML is given
    as text or as the path of a file."""
    text = YAML.replace("    wait: 1h\n", "    wait: 1h\n    wait: 2h\n")
    source: str | Path = text
    if as_file:
        source = tmp_path / "nap.yaml"
        source.write_text(text)
    with pytest.raises(InvalidInput, match=r"duplicate key 'wait' at line 5, column 5 \(first at line 4"):
        engine.publish(source)
