"""Reading a registry's samples in the metrics tests: one dict per family, keyed by label sets."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

__all__ = ["Samples", "samples"]


class Samples:
    """The samples of one exposition: `value(name, **labels)` sums every sample of `name` whose labels
    include `labels` (0 when there is none), so a test names only the labels it pins."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.rows: list[tuple[str, dict[str, str], float]] = [
            (s.name, dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]

    def value(self, name: str, **labels: str) -> float:
        return sum(v for n, ls, v in self.rows if n == name and _within(labels, ls))

    def labelsets(self, name: str) -> list[dict[str, str]]:
        return [ls for n, ls, _ in self.rows if n == name]

    def names(self) -> set[str]:
        return {n for n, _, _ in self.rows}


def _within(wanted: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in wanted.items())


def samples(source: Collector) -> Samples:
    return Samples(generate_latest(source).decode())
