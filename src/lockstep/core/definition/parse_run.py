"""The `run` step: start a child run of another definition of the same tenant and take its output.

- id: kyc
  run:
    definition: kyc-check        # a definition of the same tenant (there is no way to name another's)
    version: latest              # or a version number, pinned
    input: {customer: "${input.customer}"}
    output_sensitive: [/score]   # optional, as for an activity's output
"""

from __future__ import annotations

from collections.abc import Mapping

from ..expr import compile_template
from .checks import NAME_RE, Checker, step_header
from .model import Limits, RunStep, Step
from .sensitivity import pointer_list

__all__ = ["parse_run_step"]


def parse_run_step(c: Checker, i: int, raw: Mapping[str, object], lim: Limits, at: str) -> Step | None:
    sid, p, nxt = step_header(c, i, raw, at, "run")
    body = raw["run"]
    rp = f"{p}.run"
    if not isinstance(body, Mapping):
        c.add(rp, "must be a mapping such as {definition: kyc-check, version: latest, input: {...}}")
        return None
    c.keys(rp, body, ("definition", "version", "input", "output_sensitive"))
    name = body.get("definition")
    if not isinstance(name, str) or not NAME_RE.match(name):
        c.add(
            f"{rp}.definition",
            "required: the name of a definition of this tenant (lowercase letters, digits and -)",
        )
        name = ""
    version = body.get("version", "latest")
    if version == "latest":
        pinned = None
    elif isinstance(version, bool) or not isinstance(version, int) or version < 1:
        c.add(f"{rp}.version", "must be a version number (>= 1) or latest (the newest when the step starts)")
        pinned = None
    else:
        pinned = version
    return RunStep(
        id=sid,
        next=nxt,
        definition=name,
        version=pinned,
        input=c.template(f"{rp}.input", body.get("input", {})) or compile_template({}),
        output_sensitive=pointer_list(c, f"{rp}.output_sensitive", body.get("output_sensitive", False), lim),
    )
