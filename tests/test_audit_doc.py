"""docs/security.md stays true about the audit log: every action name the code writes is listed there."""

from __future__ import annotations

import re
from pathlib import Path

from lockstep.app.audit import ACTIONS, user_change

DOC = Path(__file__).parent.parent / "docs" / "security.md"


def test_every_audit_action_is_in_the_security_doc() -> None:
    """An action added to app/audit.py's ACTIONS without its row in the Audit log section fails."""
    section = DOC.read_text().split("\n## Audit log\n", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([a-z_.]+)` \|", section, re.MULTILINE))
    assert listed == set(ACTIONS)


SRC = Path(__file__).parent.parent / "src" / "lockstep"
_NAME = re.compile(r"^[a-z]+\.[a-z_]+$")


def _written_actions() -> set[str]:
    """The action names passed as literals to the calls that write audit rows, anywhere in the package."""
    import ast

    found = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name not in {"record", "refused", "audit", "command", "_refused", "_command"}:
                continue
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and _NAME.match(arg.value):
                    found.add(arg.value)
    return found


def test_every_action_written_is_a_known_one() -> None:
    """A row written with an action name that ACTIONS (and so the doc) does not list fails."""
    written = _written_actions()
    assert "repair.pause" in written  # the scan sees the calls
    assert written <= set(ACTIONS), sorted(written - set(ACTIONS))
    changes = [{"disabled": True}, {"disabled": False}, {"password_hash": "x"}, {"key_hash": "x"}]
    changes += [{"email": "a@b.c"}, {"roles": ("admin",)}, {"groups": ()}, {"something": 1}]
    assert {user_change(c)[0] for c in changes} <= set(ACTIONS)
