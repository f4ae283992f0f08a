"""lockstep's test lab: the process harness (`fleet/`, also used by the tests with real processes), the
fault suite and the benchmark. It lives beside the package, not in the wheel: run it from a checkout
(`python -m lab.faults`, `python -m lab.bench`, or `make faults` / `make bench`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["CHECKOUT", "lab_env"]

CHECKOUT = Path(__file__).resolve().parents[1]


def lab_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the checkout on PYTHONPATH, so the processes the lab starts (workers loading the lab's
    activities, the downstream service, the hostile tenant) import `lab` from any working directory."""
    paths = [str(CHECKOUT), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return {**env, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
