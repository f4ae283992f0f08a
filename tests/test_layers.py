"""Architecture rules, read from the folder tree: imports point inward (entry points -> runtime -> app ->
store -> core), no module imports a private name of another, and no imports go in circles."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "lockstep"

# The rings, innermost first; each folder of the package is one. A ring imports only itself and the
# rings inside it. `errors` is the one shared leaf (it imports nothing) that every ring but the pure
# core may use. Everything else at the package root and the remaining folders (api, ui, examples,
# testing) are entry points: they may import anything and nothing in a ring imports them.
RINGS = ["core", "store", "app", "runtime"]
LEAVES = {"errors"}
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


def _module(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(path: Path) -> list[tuple[str, list[str], int, bool]]:
    """(absolute module, imported names, level, at module level) for every import in a file."""
    tree = ast.parse(path.read_text())
    pkg = list(path.relative_to(SRC.parent).with_suffix("").parts[:-1])
    top = set(map(id, tree.body))
    guarded = {id(n) for s in tree.body if isinstance(s, ast.If) for n in ast.walk(s)}  # TYPE_CHECKING
    out = []
    for node in ast.walk(tree):
        eager = id(node) in top
        if isinstance(node, ast.Import):
            out += [(a.name, [], 0, eager) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            if node.level:
                base = pkg[: len(pkg) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
                out.append((mod, names, node.level, eager and id(node) not in guarded))
            else:
                out.append((node.module or "", names, 0, eager and id(node) not in guarded))
    return out


def _sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _modules() -> set[str]:
    return {_module(p) for p in _sources()}


def test_the_rings_are_folders() -> None:
    """Every ring named in the rule exists as a folder, and no application module sits at the root."""
    assert all((SRC / ring / "__init__.py").exists() for ring in RINGS)
    root = {p.stem for p in SRC.glob("*.py")}
    # _deferred is import-time plumbing of the package itself (it defers a dependency's start-up cost).
    assert root <= {"__init__", "__main__", "_deferred", "engine", "errors", "serve"}, root


def test_imports_point_inward() -> None:
    """A ring imports only itself and the rings inside it (and the errors leaf); the core nothing."""
    problems = []
    for path in _sources():
        part = _part(_module(path))
        if part not in RINGS and part not in LEAVES:
            continue
        allowed = set() if part in LEAVES else {*RINGS[: RINGS.index(part) + 1], *LEAVES}
        if part == "core":
            allowed = {"core"}
        for mod, _, _, _ in _imports(path):
            if mod.startswith("lockstep.") and _part(mod) not in allowed:
                problems.append(f"{path.relative_to(SRC)} imports {mod}")
    assert problems == []


def test_core_is_pure() -> None:
    """The core imports no clock, randomness, I/O, logging or concurrency modules."""
    problems = []
    for path in (SRC / "core").rglob("*.py"):
        for mod, _, level, _ in _imports(path):
            if level == 0 and mod.split(".")[0] in CORE_FORBIDDEN_MODULES:
                problems.append(f"{path.name} imports {mod}")
    assert problems == []


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_module_imports_a_private_name_of_another() -> None:
    """A leading underscore means "this module only": no other module imports such a name."""
    problems = []
    for path in _sources():
        me = _module(path)
        for mod, names, _, _ in _imports(path):
            if mod.startswith("lockstep") and mod != me:
                problems += [f"{path.relative_to(SRC)} imports {mod}.{n}" for n in names if _private(n)]
    assert problems == []


def test_no_import_circles() -> None:
    """The graph of imports between lockstep's modules (also those inside functions or only for type
    checking: a lazy import that closes a circle is a circle all the same) has no cycle."""
    modules = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for path in _sources():
        me = _module(path)
        for mod, names, _, _ in _imports(path):
            if not mod.startswith("lockstep"):
                continue
            # `from pkg import name` imports the module pkg.name when there is one, else the package.
            targets = {f"{mod}.{n}" for n in names if f"{mod}.{n}" in modules} or {mod}
            graph[me] |= {t for t in targets if t in modules and t != me and not me.startswith(t + ".")}
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(modules):
        if node not in state:
            visit(node)
    assert cycles == []


# The application layer's floor: the kernel and the rules it applies. They import no feature service, and
# the feature services take the kernel: only the facade that composes them (app/service.py) knows Service.
APP_FLOOR = {"lockstep.app.kernel", "lockstep.app.port", "lockstep.app.quotas", "lockstep.app.failpoints"}


def _app_imports(path: Path) -> set[str]:
    modules = _modules()
    found = set()
    for mod, names, _, _ in _imports(path):
        targets = {f"{mod}.{n}" for n in names if f"{mod}.{n}" in modules} or {mod}
        found |= {t for t in targets if t.startswith("lockstep.app.")}
    return found


def test_the_kernel_imports_no_feature_service() -> None:
    """Everything below the feature services (the kernel, the tenant-limit rules, the fail points)
    imports only itself from the application layer."""
    floor = {m: _app_imports(SRC.parent / (m.replace(".", "/") + ".py")) - APP_FLOOR for m in APP_FLOOR}
    assert floor == {m: set() for m in APP_FLOOR}


def test_only_the_facade_imports_the_service() -> None:
    """Feature services are built on the kernel, never on Service (which composes them)."""
    users = {p.name for p in (SRC / "app").rglob("*.py") if "lockstep.app.service" in _app_imports(p)}
    assert users <= {"service.py"}, users
