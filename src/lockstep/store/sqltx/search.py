"""RunSearchTx in SQL (store/port/search.py): one statement per question, the same text for both
backends but for the parameter style (queries.sql of each)."""

from __future__ import annotations

from ...core.state import RunState
from ..port.search import INPUT_KEY, MAX_INPUT_DEPTH, MAX_INPUT_VALUE, RunQuery
from .runs import SqlRunsTx

__all__ = ["SqlRunSearchTx"]


class SqlRunSearchTx(SqlRunsTx):
    def search_runs(self, tenant: str, query: RunQuery, before: str, limit: int) -> list[RunState]:
        prefix = query.run_prefix or None
        params: dict[str, object] = {
            "tenant": tenant,
            "status": query.status or None,
            "definition": query.definition or None,
            "version": query.version,
            # A range on the run id: the ids in [prefix, prefix + "g") (run ids are lowercase hex).
            "low": prefix,
            "high": prefix + "g" if prefix else None,
            "start_key": query.start_key or None,
            "since": query.started_from or None,
            "until": query.started_to or None,
            "before": before or "~",
            "limit": limit,
        }
        name = "runs_search"
        if query.input_path:
            name = "runs_search_input"  # its own statement: the others never parse a snapshot
            params.update(self._input_params(query))
        rows = self.c.execute(self.q[name], params).fetchall()
        return [self._state_of(r[0]) for r in rows]

    def _input_params(self, query: RunQuery) -> dict[str, object]:
        path = query.input_path
        # The UI checks these with a message for people; this is the store's own guard, since the keys
        # are written into a JSON path.
        if len(path) > MAX_INPUT_DEPTH or not all(INPUT_KEY.match(k) for k in path):
            raise ValueError(f"input filter path {'.'.join(path)[:100]!r} is not allowed")
        if query.input_value is None or len(query.input_value) > MAX_INPUT_VALUE:
            raise ValueError(f"an input filter needs a value of at most {MAX_INPUT_VALUE} characters")
        # SQLite reads the JSON path, PostgreSQL the array of keys (list_param: its text[]).
        sqlite_path = "$.input" + "".join(f'."{k}"' for k in path)
        return {"path": sqlite_path, "keys": self.list_param(["input", *path]), "value": query.input_value}

    def run_counts(self, tenant: str, definition: str) -> list[tuple[int, str, int]]:
        rows = self.c.execute(self.q["run_counts"], {"tenant": tenant, "definition": definition})
        return [(int(v), str(s), int(n)) for v, s, n in rows]
