"""From a parsed YAML/JSON document to a `Definition`: validate it statically, listing every problem with
its path and a fix, compile its expressions, and digest it.

The digest is the sha256 of the canonical JSON of the document as given, so identical content is the
same version, and stored runs name the version they run by it.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import replace

import jsonschema

from ..canonical import digest
from .checks import NAME_RE, Checker, check_graph, non_json, step_outputs
from .model import FOUR_EYES_REPAIRS, Definition, DefinitionError, Limits, Step
from .parse_migration import parse_migration
from .references import check_references
from .sensitivity import classify
from .shapes import all_steps, check_shapes, nested_places, parse_any

__all__ = ["parse_definition"]


def parse_definition(document: object, limits: Limits | None = None) -> Definition:
    """Validate a parsed YAML/JSON document and compile it; raise DefinitionError listing every problem."""
    lim = limits or Limits()
    if not isinstance(document, Mapping):
        raise DefinitionError([("$", "a definition must be a mapping with name and steps")])
    c = Checker(replace(lim.expressions, step_outputs=step_outputs(document.get("steps"))))
    not_json = non_json(document, "$")
    if not_json:
        raise DefinitionError(not_json)
    c.keys(
        "$",
        document,
        (
            "name",
            "description",
            "input_schema",
            "steps",
            "output",
            "four_eyes",
            "sensitive_input",
            "migration",
        ),
    )
    name = document.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        c.add("name", "required; lowercase letters, digits and -, e.g. order-fulfilment")
        name = ""
    schema = document.get("input_schema")
    if schema is not None:
        if not isinstance(schema, Mapping):
            c.add("input_schema", "must be a JSON Schema object")
            schema = None
        else:
            try:
                jsonschema.Draft202012Validator.check_schema(schema)
            except jsonschema.SchemaError as exc:
                c.add("input_schema", f"not a valid JSON Schema: {exc.message}")
                schema = None
    raw_steps = document.get("steps")
    steps: list[Step] = []
    skip_roles: dict[str, tuple[str, ...]] = {}
    if not isinstance(raw_steps, list) or not raw_steps:
        c.add("steps", "required: a non-empty list of steps")
    else:
        if len(raw_steps) > lim.max_steps:
            c.add("steps", f"{len(raw_steps)} steps exceed the tenant limit of {lim.max_steps}")
        for i, raw in enumerate(raw_steps):
            s, skip = parse_any(c, i, raw, lim, skips=skip_roles)
            if s is not None:
                steps.append(s)
                if skip is not None:
                    skip_roles[s.id] = skip
        seen: set[str] = set()
        for s in steps:
            if s.id in seen:
                c.add(f"steps({s.id}).id", "duplicate step id")
            seen.add(s.id)
        if s_ids := [s for s in steps if s.id == "end"]:
            c.add(f"steps({s_ids[0].id}).id", "`end` is reserved (next: end finishes the run)")
        check_graph(c, steps)
    output = c.template("output", document["output"]) if "output" in document else None
    check_shapes(c, steps, lim, output)
    four_eyes = _four_eyes(c, document.get("four_eyes", []))
    migration = parse_migration(c, document.get("migration"), lim.max_wait)
    desc = document.get("description", "")
    if not isinstance(desc, str):
        c.add("description", "must be a string")
        desc = ""
    sensitivity = classify(c, document, schema, all_steps(steps), output, lim)
    if lim.publish_checks and not c.problems:  # on a sound structure only: paths and graph are exact
        check_references(c, steps, output, schema)
    if c.problems:
        raise DefinitionError(c.problems)
    doc = dict(document)
    return Definition(
        name=str(name),
        digest=digest(doc),
        document=doc,
        steps=tuple(steps),
        input_schema=dict(schema) if schema is not None else None,
        output=output,
        description=desc,
        index={s.id: i for i, s in enumerate(steps)},
        skip_roles=skip_roles,
        four_eyes=four_eyes,
        migration_approval=migration,
        sensitivity=sensitivity,
        warnings=tuple(c.warnings),
        nested=nested_places(steps),
    )


def _four_eyes(c: Checker, raw: object) -> frozenset[str]:
    """`four_eyes: [skip, migrate, resolve]`: these repairs are proposals until a second operator confirms."""
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        c.add("four_eyes", f"must be a list of repairs, some of: {', '.join(FOUR_EYES_REPAIRS)}")
        return frozenset()
    for x in raw:
        if x not in FOUR_EYES_REPAIRS:
            hint = difflib.get_close_matches(x, FOUR_EYES_REPAIRS, n=1)
            c.add(
                "four_eyes",
                f"unknown repair {x!r}"
                + (f" (did you mean `{hint[0]}`?)" if hint else "")
                + f"; allowed: {', '.join(FOUR_EYES_REPAIRS)}",
            )
    if len(set(raw)) != len(raw):
        c.add("four_eyes", "lists a repair twice")
    return frozenset(x for x in raw if x in FOUR_EYES_REPAIRS)
