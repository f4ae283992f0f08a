"""Hypothesis fuzzing of the expression compiler and the definition parser: every generated expression,
definition tree or YAML/JSON text is accepted or refused with ExprError / DefinitionError /
InvalidInput; never another exception, a crash or a hang (a deadline per example).

The CEL library is Rust: a hole in the bounds would be a segfault, which would kill pytest. So the
fuzzers run in a child interpreter (this file run as a script); the test checks its exit status."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockstep.api.app import create_app
from lockstep.core.definition import DefinitionError, Limits, parse_definition
from lockstep.core.expr import ExprError, compile_expr, evaluate
from lockstep.core.exprreads import reads
from lockstep.core.exprtypes import condition_type
from lockstep.engine import Engine, load_document
from lockstep.errors import InvalidInput

FUZZ = settings(
    max_examples=600,
    deadline=timedelta(seconds=2),  # the hang bound: one example never takes longer
    derandomize=True,  # the same examples on every run: a failure is reproducible, never flaky
    database=None,
    suppress_health_check=list(HealthCheck),
)

# --- expressions ---------------------------------------------------------------------------------
NAMES = st.sampled_from(["input", "steps", "run", "x", "i", "input.items", "input.a.b", "steps.a.output"])
LITERALS = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.text(max_size=8).map(json.dumps),
    st.sampled_from(["true", "false", "null", "1u", "0x1F", "b'ab'", "r'\\d'", "'''x'''", "[]", "{}"]),
)
BINARY = st.sampled_from(["+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||", " in "])
MACROS = st.sampled_from(["all", "exists", "exists_one", "map", "filter"])
FUNCS = st.sampled_from(["size", "has", "int", "string", "double", "duration", "timestamp", "type"])
METHODS = st.sampled_from(["contains", "startsWith", "endsWith", "matches", "size"])


def _extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(inner, BINARY, inner).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        st.tuples(st.sampled_from(["!", "-"]), inner).map("".join),
        inner.map(lambda e: f"({e})"),
        st.tuples(inner, inner, inner).map(lambda t: f"{t[0]} ? {t[1]} : {t[2]}"),
        st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.lists(st.tuples(inner, inner), max_size=2).map(
            lambda kv: "{" + ", ".join(f"{k}: {v}" for k, v in kv) + "}"
        ),
        st.tuples(inner, st.sampled_from(["a", "b", "output", "items"])).map(lambda t: f"{t[0]}.{t[1]}"),
        st.tuples(inner, inner).map(lambda t: f"{t[0]}[{t[1]}]"),
        st.tuples(FUNCS, inner).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(inner, METHODS, inner).map(lambda t: f"{t[0]}.{t[1]}({t[2]})"),
        st.tuples(inner, MACROS, st.sampled_from(["i", "j", "x"]), inner).map(
            lambda t: f"{t[0]}.{t[1]}({t[2]}, {t[3]})"
        ),
    )


GRAMMAR = st.recursive(st.one_of(NAMES, LITERALS), _extend, max_leaves=12)
TOKENS = st.sampled_from([*"()[]{}.,?:!<>=+-*/%'\"\\ \n\tabxyz019_", "&&", "||", "input", "exists("])
# Shapes that crashed or stalled the library: long chains, deep brackets, deep comprehensions.
DEEP = st.one_of(
    st.tuples(st.integers(1, 40_000), BINARY).map(lambda t: t[1].join(["1"] * t[0])),
    st.tuples(st.integers(1, 120_000), st.sampled_from(["()", "[]", "{}"])).map(
        lambda t: t[1][0] * t[0] + "1" + t[1][1] * t[0]
    ),
    st.integers(1, 40_000).map(lambda n: "input" + ".a" * n),
    st.integers(1, 40_000).map(lambda n: "!" * n + "true"),
    st.integers(1, 12).map(
        lambda n: "".join(f"input.items.exists(x{k}, " for k in range(n)) + "true" + ")" * n
    ),
)
EXPRESSIONS = st.one_of(GRAMMAR, st.lists(TOKENS, max_size=40).map("".join), DEEP)
JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=6)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(["a", "b", "items", "q"]), inner)
    ),
    max_leaves=20,
)


@given(source=EXPRESSIONS, context=JSON)
@FUZZ
def fuzz_expressions(source: str, context: Any) -> None:
    """Compiling is Expr or ExprError; evaluating an accepted one on small data is a value or ExprError;
    the publish checks' analyses of an accepted one (what it reads, its type) never fail."""
    try:
        expr = compile_expr(source)
    except ExprError:
        return
    reads(expr)
    condition_type(source, lambda path: "number" if path[:1] == ("input",) else None)
    ctx = {"input": context, "steps": {"a": {"output": context}}, "run": {"id": "r"}}
    with contextlib.suppress(ExprError):
        evaluate(expr, ctx)


# --- definitions ---------------------------------------------------------------------------------
STEP_IDS = st.sampled_from(["a", "b", "c", "end", "A!", ""])
CONDITIONS = st.one_of(GRAMMAR, DEEP, st.sampled_from(["${input.x}", "${", 3, None, ["x"]]))
TEMPLATES = st.one_of(
    JSON,
    GRAMMAR.map(lambda e: "${" + e + "}"),
    st.dictionaries(st.sampled_from(["k", "v"]), GRAMMAR.map(lambda e: "pre ${" + e + "} post")),
)
STEPS = st.one_of(
    st.fixed_dictionaries(
        {"id": STEP_IDS, "activity": st.sampled_from(["a.b", "x", "1"]), "timeout": st.just("1s")},
        optional={"input": TEMPLATES, "retry": JSON, "next": STEP_IDS},
    ),
    st.fixed_dictionaries(
        {
            "id": STEP_IDS,
            "choice": st.lists(
                st.one_of(
                    st.fixed_dictionaries({"if": CONDITIONS, "next": STEP_IDS}),
                    st.fixed_dictionaries({"else": STEP_IDS}),
                ),
                max_size=3,
            ),
        }
    ),
    st.fixed_dictionaries({"id": STEP_IDS, "wait": st.one_of(st.just("1h"), JSON)}),
    st.fixed_dictionaries({"id": STEP_IDS, "succeed": st.one_of(st.just(True), st.just({"output": "x"}))}),
    st.fixed_dictionaries(
        {"id": STEP_IDS, "approval": st.fixed_dictionaries({"approvers": JSON, "timeout": st.just("1d")})}
    ),
    JSON,
)
DEFINITIONS = st.one_of(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["ok", "Bad Name", ""]), "steps": st.lists(STEPS, max_size=4)},
        optional={"output": TEMPLATES, "input_schema": JSON, "description": JSON},
    ),
    JSON,
)


@given(document=DEFINITIONS)
@FUZZ
def fuzz_definition_trees(document: Any) -> None:
    """Any tree is a Definition or a DefinitionError."""
    with contextlib.suppress(DefinitionError):
        parse_definition(document)


# --- definitions that reach the publish checks (references, flow, schema, condition types) -----------
IDS = ["a", "b", "c", "d", "e", "f"]
READS = st.sampled_from(
    [
        "input.amount",
        "input.amout",
        "input.customer.name",
        "input.customer.nmae",
        "input.note.first",
        "input.lines.total",
        "input",
        "input['amount']",
        "steps.a.output",
        "steps.b.status",
        "steps.c.attempts",
        "steps.zz.output",
        "steps.a.outptu",
        "steps['e'].output.x",
        "steps",
        "run.id",
        "run.idd",
        "input.lines.exists(l, l.qty > 1)",
        "input.lines.map(input, input.a)",
    ]
)
CHECKED_EXPRESSIONS = st.one_of(
    READS,
    st.tuples(READS, BINARY, READS).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
    st.tuples(READS, READS, READS).map(lambda t: f"{t[0]} ? {t[1]} : {t[2]}"),
    st.tuples(FUNCS, READS).map(lambda t: f"{t[0]}({t[1]})"),
    LITERALS,
)
CHECKED_TEMPLATES = st.one_of(
    CHECKED_EXPRESSIONS.map(lambda e: "${" + e + "}"),
    st.dictionaries(st.sampled_from(["k", "v", "w"]), CHECKED_EXPRESSIONS.map(lambda e: "x ${" + e + "}")),
    st.lists(CHECKED_EXPRESSIONS.map(lambda e: "${" + e + "}"), max_size=3),
)
SCHEMAS = st.one_of(
    st.none(),
    st.sampled_from(
        [
            {"type": "object", "additionalProperties": False, "properties": {"amount": {"type": "number"}}},
            {
                "type": "object",
                "properties": {
                    "amount": {"type": "integer"},
                    "note": {"type": "string"},
                    "lines": {"type": "array", "items": {"type": "object"}},
                    "customer": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"name": {"type": ["string", "null"]}},
                    },
                },
            },
            {
                "$defs": {"n": {"allOf": [{"$ref": "#/$defs/n"}], "properties": {"amount": {}}}},
                "$ref": "#/$defs/n",
            },
            {"anyOf": [{"type": "object", "properties": {"amount": {}}}, {"type": "string"}]},
        ]
    ),
    JSON.filter(lambda v: isinstance(v, dict)),
)


def _checked_step(draw: Any, sid: str, ids: list[str]) -> dict[str, Any]:
    targets = st.sampled_from([*ids, "end"])
    kind = draw(st.sampled_from(["activity", "activity", "wait", "choice", "approval", "fail", "succeed"]))
    nxt = draw(st.one_of(st.none(), targets))
    if kind == "activity":
        step: dict[str, Any] = {
            "id": sid,
            "activity": "svc.call",
            "timeout": "5s",
            "input": draw(CHECKED_TEMPLATES),
        }
        if draw(st.booleans()):
            step["compensate"] = {"activity": "svc.undo", "input": draw(CHECKED_TEMPLATES)}
        if draw(st.booleans()):
            step["idempotency_key"] = "k-${" + draw(CHECKED_EXPRESSIONS) + "}"
    elif kind == "wait":
        step = {"id": sid, "wait": draw(st.sampled_from(["1s", {"until": "${" + draw(READS) + "}"}]))}
    elif kind == "choice":
        branches = [
            {"if": c, "next": t}
            for c, t in draw(st.lists(st.tuples(CHECKED_EXPRESSIONS, targets), max_size=3))
        ]
        step = {
            "id": sid,
            "choice": branches + ([{"else": draw(targets)}] if draw(st.booleans()) or not branches else []),
        }
        nxt = None
    elif kind == "approval":
        policy: dict[str, Any] = {
            "approvers": {"users": ["al"]},
            "timeout": "1d",
            "details": draw(CHECKED_TEMPLATES),
        }
        policy["on_reject"] = draw(st.sampled_from(["fail", *ids, "end"]))
        policy["on_timeout"] = draw(st.sampled_from(["reject", "fail", *ids, "end"]))
        step = {"id": sid, "approval": policy}
    elif kind == "fail":
        step = {"id": sid, "fail": {"error": "E", "message": "m ${" + draw(CHECKED_EXPRESSIONS) + "}"}}
        nxt = None
    else:
        step = {"id": sid, "succeed": draw(st.sampled_from([True, {"output": draw(CHECKED_TEMPLATES)}]))}
        nxt = None
    if nxt is not None:
        step["next"] = nxt
    return step


@st.composite
def checked_definitions(draw: Any) -> dict[str, Any]:
    """Sound structure (known ids, kinds, targets), so the reference, flow and type checks all run."""
    n = draw(st.integers(1, len(IDS)))
    doc: dict[str, Any] = {"name": "fuzz", "steps": [_checked_step(draw, sid, IDS[:n]) for sid in IDS[:n]]}
    schema = draw(SCHEMAS)
    if schema is not None:
        doc["input_schema"] = schema
    if draw(st.booleans()):
        doc["output"] = draw(CHECKED_TEMPLATES)
    return doc


@given(document=checked_definitions())
@FUZZ
def fuzz_checked_definitions(document: Any) -> None:
    """Definitions that reach the publish checks are a Definition or a DefinitionError, never another
    exception, and a definition the checks accept is still accepted without them."""
    try:
        parse_definition(document)
    except DefinitionError:
        return
    parse_definition(document, Limits(publish_checks=False))


def _yaml_text(document: Any, style: int) -> str:
    if style == 0:
        return json.dumps(document)
    return yaml.safe_dump(document, default_flow_style=style == 1)


YAML_NOISE = st.lists(
    st.sampled_from(
        [
            "&a ",
            "*a",
            "<<: ",
            ": ",
            "- ",
            "\n",
            "  ",
            "[",
            "]",
            "{",
            "}",
            ",",
            "'",
            '"',
            "!!str ",
            "!!python/object ",
            "? ",
            "|",
            ">",
            "#",
            "%YAML 1.1\n",
            "---\n",
            "x",
            "1",
            "name",
            "steps",
            "\x00",
            "\x85",
            "\ufeff",
            "\ud800",
            "\t",
        ]
    ),
    max_size=60,
).map("".join)


@given(document=DEFINITIONS, style=st.integers(0, 2), noise=YAML_NOISE, cut=st.integers(0, 400))
@FUZZ
def fuzz_documents(document: Any, style: int, noise: str, cut: int) -> None:
    """Generated YAML/JSON text, whole, truncated or spliced with YAML syntax, is a definition, or
    InvalidInput / DefinitionError (what the API answers with a 422)."""
    text = _yaml_text(document, style)
    for candidate in (text, text[:cut] + noise + text[cut:], noise):
        with contextlib.suppress(InvalidInput, DefinitionError):
            parse_definition(load_document(candidate if "\n" in candidate else candidate + "\n"))


@given(document=DEFINITIONS, style=st.integers(0, 2), noise=YAML_NOISE, cut=st.integers(0, 400))
@settings(FUZZ, max_examples=150)
def fuzz_publish_over_http(document: Any, style: int, noise: str, cut: int) -> None:
    """POST /v1/definitions with generated YAML/JSON: a 201/200 or a 4xx problem, never a 5xx."""
    text = _yaml_text(document, style)
    client, key = _http()
    for body, content_type in (
        (text, "application/yaml" if style else "application/json"),
        (text[:cut] + noise + text[cut:], "application/yaml"),
    ):
        r = client.post(
            "/v1/definitions",
            content=body.encode("utf-8", "surrogatepass"),
            headers={"Authorization": f"Bearer {key}", "content-type": content_type},
        )
        assert r.status_code < 500, (r.status_code, r.text[:300], body[:300])


_HTTP: list[Any] = []


def _http() -> tuple[Any, str]:
    """One app over a throwaway database for the whole fuzz (the child process removes it on exit)."""
    if not _HTTP:
        # Imported here, in the child only: importing it warns (deprecation), which pytest makes an error.
        from fastapi.testclient import TestClient

        url = os.environ.get(FUZZ_DB_ENV)
        if url is None:
            where = tempfile.mkdtemp()
            atexit.register(shutil.rmtree, where, True)
            url = f"sqlite:///{where}/fuzz.sqlite"
        engine = Engine.open(url)
        atexit.register(engine.close)
        principals = engine.service.principals
        principals.create_tenant("acme")
        key = principals.create_user("acme", "admin", ["admin"], []).api_key
        _HTTP.extend([TestClient(create_app(engine.service, ui=False)), key])
    return _HTTP[0], _HTTP[1]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_the_fuzzers_find_nothing_in_a_child_process(kind: str, request: pytest.FixtureRequest) -> None:
    """The fuzzers pass in a child interpreter: no failing example, no crash, no hang; the publish fuzzer
    on both backends (the others never reach a database)."""
    names = FUZZERS if kind == "sqlite" else ["fuzz_publish_over_http"]
    env = dict(os.environ)
    env.pop(FUZZ_DB_ENV, None)
    if kind == "postgresql":
        env[FUZZ_DB_ENV] = str(request.getfixturevalue("pg_url"))
    proc = subprocess.run(
        [sys.executable, str(Path(__file__)), *names],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
    assert proc.stdout.split() == names


FUZZ_DB_ENV = "LOCKSTEP_FUZZ_DB"
FUZZERS = [
    "fuzz_expressions",
    "fuzz_definition_trees",
    "fuzz_checked_definitions",
    "fuzz_documents",
    "fuzz_publish_over_http",
]

if __name__ == "__main__":
    for name in sys.argv[1:] or FUZZERS:
        globals()[name]()
        print(name, flush=True)
