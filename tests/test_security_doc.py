"""docs/security.md stays true: every limit of core/limits.py is listed there with its default."""

from __future__ import annotations

import re
from pathlib import Path

from lockstep.core import limits

DOC = Path(__file__).parent.parent / "docs" / "security.md"


def _rows() -> dict[str, str]:
    rows = {}
    section = DOC.read_text().split("\n## Limits\n", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        m = re.match(r"^\|\s*`([a-z_]+)`\s*\|([^|]*)\|", line)
        if m:
            rows[m.group(1)] = m.group(2).strip()
    return rows


def test_every_limit_is_in_the_security_doc_with_its_default() -> None:
    """A limit added to core/limits.py without its row in the Limits table (or with a stale default) fails."""
    rows = _rows()
    every = {**limits.TENANT_LIMITS, **limits.SERVER_LIMITS, **limits.HISTORY_LIMITS}
    missing = sorted(set(every) - set(rows))
    assert not missing, f"docs/security.md lacks rows for {missing}"
    for name, limit in every.items():
        shown = rows[name].replace(",", "").replace("_", "")
        assert str(limit.default) in shown, (
            f"{name}: the doc says {rows[name]!r}, the default is {limit.default}"
        )
