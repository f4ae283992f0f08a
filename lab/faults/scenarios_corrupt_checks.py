"""The checks of scenario corrupt_history (scenarios_corrupt.py), apart so the checker imports no scenario."""

from __future__ import annotations

__all__ = ["CORRUPTION_CHECKS"]

CORRUPTION_CHECKS = ("damage_missed", "damaged_run_advanced")
