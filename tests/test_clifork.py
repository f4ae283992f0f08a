"""lab.clifork, which most CLI tests run `python -m lockstep` through, gives what a real subprocess gives:
the same stdout, stderr and exit status, each command with its own environment, directory and stdin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lab import clifork

LOCKSTEP = [sys.executable, "-m", "lockstep"]


def _env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}, **extra}


def _forked_and_real(
    cmd: list[str], env: dict[str, str], cwd: Path
) -> list[subprocess.CompletedProcess[str]]:
    """The command through clifork.run, then through subprocess.run, with the same arguments."""
    options: dict[str, Any] = {"env": env, "cwd": cwd, "capture_output": True, "text": True}
    return [run(cmd, **options, timeout=120, check=False) for run in (clifork.run, subprocess.run)]


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["runs"],
        ["show", "no-such-run"],
        ["publish", "missing.yaml"],
        ["runs", "--no-such-option"],
        ["users", "create", "bo", "--tenant", "nowhere", "--roles", "viewer"],
    ],
)
def test_a_forked_command_prints_and_exits_as_a_real_one(tmp_path: Path, args: list[str]) -> None:
    """Output and exit status are byte for byte those of `python -m lockstep` in a new process."""
    cmd = [*LOCKSTEP, "--db", f"sqlite:///{tmp_path / 'l.db'}", *args]
    forked, real = _forked_and_real(cmd, _env(), tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)


def test_each_command_gets_its_own_environment_directory_and_stdin(tmp_path: Path) -> None:
    """A variable, the working directory and stdin reach the command; nothing leaks into the next one."""
    (tmp_path / "d.yaml").write_text("name: here\nsteps:\n  - id: a\n    activity: x.y\n    timeout: 30s\n")
    (tmp_path / "elsewhere").mkdir()
    env = _env(LOCKSTEP_DB=f"sqlite:///{tmp_path / 'l.db'}")

    def cli(
        *args: str, env: dict[str, str], cwd: Path, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return clifork.run([*LOCKSTEP, *args], env=env, cwd=cwd, input=input, capture_output=True, text=True)

    assert cli("publish", "d.yaml", env=env, cwd=tmp_path).returncode == 0  # a path relative to cwd
    assert "here" in cli("definitions", env=env, cwd=tmp_path).stdout
    assert "here" not in cli("definitions", env=_env(), cwd=tmp_path / "elsewhere").stdout  # no LOCKSTEP_DB
    given = cli("secrets", "set", "api-key", env=env, cwd=tmp_path, input="v1\n")
    none = cli("secrets", "set", "api-key", env=env, cwd=tmp_path)
    assert "no value on stdin" not in given.stderr
    assert "no value on stdin" in none.stderr


def test_a_command_past_its_timeout_is_killed_and_reported_as_subprocess_does(tmp_path: Path) -> None:
    """TimeoutExpired, as from subprocess.run, and the command is gone: no process of it is left."""
    cmd = [*LOCKSTEP, "--db", f"sqlite:///{tmp_path / 'l.db'}", "scheduler", "--scheduler-id", tmp_path.name]
    with pytest.raises(subprocess.TimeoutExpired):
        clifork.run(cmd, env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=3)
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        left += [pid] if tmp_path.name.encode() in args and b"scheduler" in args else []
    assert not left, f"the timed-out command still runs: pids {left}"


def test_calls_it_cannot_reproduce_go_to_a_real_subprocess(tmp_path: Path) -> None:
    """Another program, check=True or an import-time variable (LOCKSTEP_FAILPOINTS) run as subprocess.run."""
    assert clifork.run(["echo", "hi"], capture_output=True, text=True).stdout == "hi\n"
    with pytest.raises(subprocess.CalledProcessError):
        clifork.run([*LOCKSTEP, "no-such-command"], env=_env(), capture_output=True, text=True, check=True)
    failing, real = _forked_and_real(
        [*LOCKSTEP, "--db", f"sqlite:///{tmp_path / 'l.db'}", "runs"],
        _env(LOCKSTEP_FAILPOINTS="no-such-rule-syntax"),
        tmp_path,
    )
    assert (failing.returncode, failing.stderr) == (real.returncode, real.stderr)
