"""docs/client.md's examples run as written: the test copies the definition and every Python block out
of the page itself (so they cannot drift) and runs them against a real `lockstep serve`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .serverkit import Server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

DOC = Path(__file__).resolve().parents[2] / "docs" / "client.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", DOC.read_text(), flags=re.S | re.M)


def test_the_examples_of_docs_client_md_run(tmp_path: Path) -> None:
    """The page's definition publishes, and each Python example runs to completion and prints what the
    page says it does (a completed run, its events, the runs, the refusal of an unknown run)."""
    (definition,) = _blocks("yaml")
    examples = _blocks("python")
    assert len(examples) == 2
    s = Server(tmp_path, f"sqlite:///{tmp_path / 'lockstep.db'}")
    try:
        s.publish(yaml.safe_load(definition))
        s.up()
        env = {**s.env, "LOCKSTEP_URL": s.url, "LOCKSTEP_API_KEY_FILE": str(s.key_files["operator"])}
        outputs = []
        for n, code in enumerate(examples):
            script = tmp_path / f"example{n}.py"
            script.write_text(code)
            done = subprocess.run(
                [sys.executable, str(script)],
                env=env,
                capture_output=True,
                text=True,
                timeout=90,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            outputs.append(done.stdout)
    finally:
        s.shutdown()
    first, second = outputs
    assert first.splitlines()[0] == "completed succeeded"
    assert "1 RunStarted" in first
    assert "RunCompleted" in first
    assert "not found: " in first
    assert second.strip() == "async completed RunCompleted"
