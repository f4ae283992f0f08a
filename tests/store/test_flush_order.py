"""Every write the SQL layer may buffer inside a batch (`self._write("name", ...)`) has its place in the
flush order: a missing one fails the whole batch at commit time ("no flush order for ..."), which only
the rare path that buffers it would show."""

from __future__ import annotations

import re
from pathlib import Path

from lockstep.store.sqltx import base

SQLTX = Path(base.__file__).parent


def test_every_buffered_write_has_a_flush_order() -> None:
    """The names given to _write across store/sqltx are all in _FLUSH_ORDER."""
    written = set()
    for module in SQLTX.glob("*.py"):
        written |= set(re.findall(r'self\._write\(\s*"([a-z_]+)"', module.read_text()))
    assert {"event_insert", "child_insert"} <= written  # the scan finds the writes it must
    assert written <= set(base._FLUSH_ORDER), sorted(written - set(base._FLUSH_ORDER))
