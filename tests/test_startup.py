"""What a lockstep process loads at start-up: the CLI does not pay for cel's interactive shell, and the
shell still works for a program that uses it."""

from __future__ import annotations

import subprocess
import sys


def _run(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.strip()


def test_the_cli_does_not_import_the_cel_shell() -> None:
    """`import lockstep.cli` (which imports cel) loads neither prompt_toolkit nor typer (cel.cli's)."""
    loaded = _run(
        "import sys, lockstep.cli; assert 'cel' in sys.modules; "
        "print(sorted(m for m in ('prompt_toolkit', 'typer') if m in sys.modules))"
    )
    assert loaded == "[]"


def test_the_deferred_cel_shell_loads_when_used_and_the_version_is_read() -> None:
    """cel.cli's names are there on first use, cel still evaluates, and lockstep.__version__ is set."""
    out = _run(
        "import lockstep, cel, cel.cli; print(callable(cel.cli.main), cel.evaluate('1 + 2', {}), "
        "bool(lockstep.__version__))"
    )
    assert out == "True 3 True"
