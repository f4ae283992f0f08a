"""Registers the `served` fixture of metricsworld.py (the scenario every metrics test reads)."""

from metricsworld import served

__all__ = ["served"]
