"""Fail points: the spec parser, firing on the n-th hit, switches, and the CLI's answer to a bad spec."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lab import clifork
from lockstep.app import failpoints


def test_parse_reads_actions_arguments_and_hit_numbers() -> None:
    """`point=action[:arg][@n]` entries separated by `;` become rules; blanks are ignored."""
    rules = failpoints.parse("a.b=kill@3; c=sleep:250 ;d=on;;")
    assert (rules["a.b"].action, rules["a.b"].nth) == ("kill", 3)
    assert (rules["c"].action, rules["c"].arg, rules["c"].nth) == ("sleep", 250, None)
    assert rules["d"].action == "on"


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("nopoint", "is not point=action"),
        ("x=explode", "unknown action 'explode'"),
        ("x=kill@two", "integers"),
    ],
)
def test_parse_rejects_a_malformed_spec_naming_the_bad_part(spec: str, fragment: str) -> None:
    """A malformed spec is a ValueError that names the part and the fix, never a silent no-op."""
    with pytest.raises(ValueError, match=fragment):
        failpoints.parse(spec)


def _child(code: str, spec: str, log: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, failpoints.ENV: spec, failpoints.LOG_ENV: str(log)}
    return clifork.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_kill_fires_on_the_nth_hit_only_and_is_logged_first(tmp_path: Path) -> None:
    """`kill@3` lets two hits pass, SIGKILLs the process on the third and logs the hit before dying."""
    log = tmp_path / "hits.jsonl"
    code = (
        "from lockstep.app import failpoints\n"
        "for i in range(5):\n"
        "    print(i, flush=True)\n"
        "    failpoints.hit('p', i=i)\n"
    )
    done = _child(code, "p=kill@3", log)
    assert done.returncode == -signal.SIGKILL
    assert done.stdout.split() == ["0", "1", "2"]
    (line,) = log.read_text().splitlines()
    assert json.loads(line)["point"] == "p"
    assert json.loads(line)["i"] == 2


def test_switches_are_off_unless_named_and_hit_ignores_them(tmp_path: Path) -> None:
    """`enabled()` is True only for a point the spec turns `on`; `hit()` on a switch does nothing."""
    code = (
        "from lockstep.app import failpoints\n"
        "failpoints.hit('s')\n"
        "print(failpoints.enabled('s'), failpoints.enabled('other'), flush=True)\n"
    )
    done = _child(code, "s=on", tmp_path / "hits.jsonl")
    assert done.returncode == 0
    assert done.stdout.split() == ["True", "False"]


def test_everything_is_inert_without_the_environment_variable() -> None:
    """In a normal process (no LOCKSTEP_FAILPOINTS) no point fires and no switch is on."""
    assert os.environ.get(failpoints.ENV) is None
    assert failpoints.active_spec() == ""
    failpoints.hit("worker.after_call")
    assert failpoints.enabled("unsafe.no_fencing") is False


def test_the_cli_refuses_a_bad_spec_with_one_line_and_warns_about_an_active_one(tmp_path: Path) -> None:
    """A bad spec stops every command with one `error:` line; an active one is announced on stderr."""
    db = f"sqlite:///{tmp_path / 'l.db'}"
    env = {**os.environ, failpoints.ENV: "x=bogus"}
    bad = clifork.run(
        [sys.executable, "-m", "lockstep", "--db", db, "definitions"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bad.returncode != 0
    assert bad.stderr.strip().startswith("error: LOCKSTEP_FAILPOINTS: unknown action 'bogus'")
    assert "Traceback" not in bad.stderr
    env[failpoints.ENV] = "unsafe.no_fencing=on"
    ok = clifork.run(
        [sys.executable, "-m", "lockstep", "--db", db, "definitions"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert "warning: fail points are active" in ok.stderr
