"""Architecture rules: imports point inward (entry points -> runtime/service -> store -> core)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "lockstep"

# Which top-level parts of the package each layer may import. The service layer is several modules
# (service, principals, approvals, observability, dispatch); entry points (cli, engine, serve, api, ui,
# examples) may import anything and are imported by nothing below them.
SERVICE = {"service", "principals", "approvals", "observability", "dispatch", "repair"}
ALLOWED = {
    "core": {"core"},
    "store": {"core", "store"},
    "errors": set(),
    "failpoints": set(),
    **{name: {"core", "store", "errors", "failpoints", *SERVICE} for name in SERVICE},
    "runtime": {"core", "store", "errors", "failpoints", "runtime", *SERVICE},
}
CORE_FORBIDDEN_MODULES = {
    "time",
    "random",
    "secrets",
    "logging",
    "os",
    "sqlite3",
    "socket",
    "uuid",
    "threading",
    "subprocess",
    "requests",
    "httpx",
    "asyncio",
}


def _part(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def _imports(path: Path) -> list[tuple[str, int]]:
    """(absolute module, level) for every import in a file, resolving relative ones inside lockstep."""
    tree = ast.parse(path.read_text())
    pkg = list(path.relative_to(SRC.parent).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, 0) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
                out.append((mod, node.level))
            else:
                out.append((node.module or "", 0))
    return out


def test_imports_point_inward() -> None:
    """A layer imports only itself and the layers inside it; the core imports nothing of lockstep."""
    problems = []
    for path in SRC.rglob("*.py"):
        part = _part(path)
        if part not in ALLOWED:
            continue
        for mod, _ in _imports(path):
            if mod.startswith("lockstep."):
                target = mod.split(".")[1]
                if target not in ALLOWED[part]:
                    problems.append(f"{path.relative_to(SRC)} imports {mod}")
    assert problems == []


def test_core_is_pure() -> None:
    """The core imports no clock, randomness, I/O, logging or concurrency modules."""
    problems = []
    for path in (SRC / "core").rglob("*.py"):
        for mod, level in _imports(path):
            if level == 0 and mod.split(".")[0] in CORE_FORBIDDEN_MODULES:
                problems.append(f"{path.name} imports {mod}")
    assert problems == []
