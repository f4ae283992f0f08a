"""A compact Gantt chart of a run: one bar per step that started, from its start to its end (or to now
while it is open), on the run's own time axis. An SVG built here with every label escaped (step keys are
tenant text); bars are sized by attributes, not inline styles, so the page's CSP holds."""

from __future__ import annotations

from datetime import datetime

from markupsafe import Markup, escape

from ..app.views import RunView
from ..core.state import STEP_OPEN
from ..core.timeutil import parse_iso

__all__ = ["gantt"]

_ROW, _LABEL, _WIDTH = 22, 210, 760  # px: a row's height, the label column, the whole chart


def gantt(run: RunView, now: datetime) -> Markup | None:
    """The chart, or None when no step has started."""
    rows = [(key, st) for key, st in run.steps.items() if st.started_at]
    if not rows:
        return None
    t0 = parse_iso(run.started_at)
    t1 = parse_iso(run.finished_at) if run.finished_at else now
    span = max((t1 - t0).total_seconds(), 0.001)
    scale = (_WIDTH - _LABEL - 10) / span
    labels, bars = [], []
    for i, (key, st) in enumerate(rows):
        start = parse_iso(st.started_at or run.started_at)
        end = now if st.status in STEP_OPEN or not st.finished_at else parse_iso(st.finished_at)
        x = _LABEL + max(0.0, (start - t0).total_seconds()) * scale
        w = max(2.0, (end - start).total_seconds() * scale)
        y = i * _ROW
        label = key if len(key) <= 28 else key[:27] + "…"
        # Labels and bars in groups of their own: a label never sits on a bar's colour.
        labels.append(f'<text x="0" y="{y + 15}">{escape(label)}</text>')
        bars.append(
            f'<g class="bar s-{escape(st.status)}"><title>{escape(key)}: {escape(st.status)}'
            f"{(' ' + escape(st.took())) if st.took() else ''}</title>"
            f'<rect x="{x:.1f}" y="{y + 4}" width="{min(w, _WIDTH - x):.1f}" height="{_ROW - 8}" rx="3"/></g>'
        )
    height = len(rows) * _ROW
    return Markup(  # noqa: S704 - every interpolated text is escaped above
        f'<svg class="gantt" role="img" aria-label="When each step ran" viewBox="0 0 {_WIDTH} {height}" '
        f'width="{_WIDTH}" height="{height}"><g class="labels">{"".join(labels)}</g>{"".join(bars)}</svg>'
    )
