"""The systemd units in deploy/systemd pass `systemd-analyze verify` (with the ExecStart binary and the
environment file pointed at this checkout's), start the commands and options lockstep really has, and
a broken unit is caught by the same check (so the check can fail)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "systemd"
UNITS = (
    "lockstep-serve.service",
    "lockstep-scheduler.service",
    "lockstep-worker@.service",
    "lockstep-remote-worker@.service",
)
LOCKSTEP = Path(sys.executable).with_name("lockstep")


def _install(tmp: Path, name: str, text: str) -> Path:
    text = text.replace("/opt/lockstep/venv/bin/lockstep", str(LOCKSTEP))
    text = text.replace("/etc/lockstep/lockstep.env", str(tmp / "lockstep.env"))
    text = text.replace("/etc/lockstep/remote-worker.env", str(tmp / "remote-worker.env"))
    unit = tmp / (name.replace("@.", "@9101.") if "@." in name else name)
    unit.write_text(text)
    return unit


def _verify(*units: Path) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("systemd-analyze")
    assert tool is not None, "systemd-analyze is missing (.ci/run installs systemd)"
    return subprocess.run(
        [tool, "verify", *map(str, units)], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """serve, scheduler and a worker instance verify clean."""
    (tmp_path / "lockstep.env").write_text((DEPLOY / "lockstep.env.example").read_text())
    (tmp_path / "remote-worker.env").write_text((DEPLOY / "remote-worker.env.example").read_text())
    units = [_install(tmp_path, name, (DEPLOY / name).read_text()) for name in UNITS]
    done = _verify(*units)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr


@pytest.mark.parametrize("name", UNITS)
def test_each_unit_starts_a_command_lockstep_has(name: str) -> None:
    """ExecStart's subcommand and options are accepted by this lockstep (its --help lists them)."""
    line = next(x for x in (DEPLOY / name).read_text().splitlines() if x.startswith("ExecStart="))
    words = line.split()[1:]
    command = words[0]
    helped = subprocess.run([str(LOCKSTEP), command, "--help"], capture_output=True, text=True, check=True)
    for word in words[1:]:
        if word.startswith("--"):
            assert word in helped.stdout, f"{name}: `lockstep {command}` has no option {word}"


def test_a_broken_unit_is_caught(tmp_path: Path) -> None:
    """A unit with a relative ExecStart fails the same verification."""
    (tmp_path / "lockstep.env").write_text("")
    text = (
        (DEPLOY / UNITS[0])
        .read_text()
        .replace("ExecStart=/opt/lockstep/venv/bin/lockstep", "ExecStart=lockstep-nowhere/x")
    )
    done = _verify(_install(tmp_path, UNITS[0], text))
    assert done.returncode != 0 or done.stderr.strip(), "a broken unit passed systemd-analyze verify"
