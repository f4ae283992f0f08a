"""The suites can run together on one pytest command line: no test module imports a `conftest` by name
(each directory without an __init__.py has its own, all called `conftest`, and `from conftest import`
gets whichever pytest imported last), and the helper modules of those directories, which pytest puts on
sys.path under their bare names, are named uniquely."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).parent


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
    return names


def test_no_test_module_imports_a_conftest_by_name() -> None:
    """`from conftest import X` breaks collection as soon as another suite's conftest is imported first."""
    offenders = sorted(str(p.relative_to(TESTS)) for p in TESTS.rglob("*.py") if "conftest" in _imports(p))
    assert offenders == [], f"move what they import into a uniquely named helper module: {offenders}"


def test_helper_modules_on_sys_path_have_unique_names() -> None:
    """Two helpers of the same bare name in directories without __init__.py would shadow each other."""
    seen: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        if (path.parent / "__init__.py").exists() or path.name == "conftest.py":
            continue
        if path.name.startswith("test_"):
            continue
        seen[path.stem].append(str(path.relative_to(TESTS)))
    assert {name: where for name, where in seen.items() if len(where) > 1} == {}
