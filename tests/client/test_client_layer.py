"""The client is an outer layer that talks HTTP only: its modules import nothing of lockstep but the
errors leaf and each other, and the remote worker imports no store, no service and no client."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "lockstep"


def _lockstep_imports(path: Path) -> set[str]:
    """The lockstep modules a file imports (relative imports resolved), at any depth of the file."""
    pkg = list(path.relative_to(SRC.parent).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            found.add(mod)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {m for m in found if m == "lockstep" or m.startswith("lockstep.")}


def test_the_client_imports_only_the_errors_and_itself() -> None:
    """lockstep.client's modules import lockstep.errors and lockstep.client.* only (no core, store, app,
    runtime or entry point): a program using it needs a URL and a key, nothing of the engine."""
    problems = {
        f"{p.name} imports {m}"
        for p in (SRC / "client").glob("*.py")
        for m in _lockstep_imports(p)
        if m != "lockstep.errors" and not m.startswith("lockstep.client")
    }
    assert problems == set()


def test_the_remote_worker_needs_no_database() -> None:
    """runtime/remote.py and the execution code it shares import no store, no service and no kernel:
    it talks to a server through the TaskApi protocol only."""
    for name in ("remote.py", "execute.py"):
        mods = _lockstep_imports(SRC / "runtime" / name)
        bad = {
            m for m in mods if m.startswith(("lockstep.store", "lockstep.app.service", "lockstep.app.kernel"))
        }
        assert bad == set(), (name, bad)


def test_importing_the_client_and_the_remote_worker_loads_no_engine() -> None:
    """In a fresh interpreter, `import lockstep.client, lockstep.runtime.remote` loads no store, no
    engine, no service and no database driver (`lockstep.Engine` still loads on first use)."""
    probe = (
        "import sys, lockstep.client, lockstep.runtime.remote\n"
        "heavy = ('lockstep.store', 'lockstep.engine', 'lockstep.app.service', 'psycopg', 'sqlite3')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
        "from lockstep import Engine\n"
        "print(Engine.__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.splitlines() == ["[]", "Engine"]
