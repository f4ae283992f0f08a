"""The http step end to end on both backends: a real loopback server, an in-process database worker."""

from __future__ import annotations

import json

from httpworld import World, definition  # tests/http: on sys.path


def _attempts(w: World, run_id: str) -> list[dict]:
    return [e for e in w.events(run_id) if e["type"] in ("ActivityCompleted", "ActivityFailed")]


def test_a_post_with_a_json_body_completes_with_the_json_answer_as_output(world: World) -> None:
    """POST with a JSON body: the output has the status, the headers and the parsed JSON body."""
    world.allow_loopback()
    doc = definition(
        "charge",
        {
            "method": "POST",
            "url": world.server.url("/ok"),
            "headers": {"X-Order": "${input.order}"},
            "body": {"amount": "${input.amount}"},
        },
    )
    shown = world.run(doc, {"order": "o-1", "amount": 42})
    assert shown["status"] == "completed", shown
    out = shown["output"]
    assert out["status"] == 200
    assert out["body"] == {"ok": True, "got": {"amount": 42}}
    assert out["headers"]["content-type"] == "application/json"
    (seen,) = world.server.seen
    assert seen.method == "POST"
    assert seen.headers["X-Order"] == "o-1"
    assert json.loads(seen.body) == {"amount": 42}
    assert seen.headers["Idempotency-Key"].endswith(":call")  # the step's key: tenant:run:step


def test_a_text_answer_is_text_and_success_can_be_any_cel_over_the_response(world: World) -> None:
    """A text/plain body is kept as text; `success` decides on status and body together."""
    world.allow_loopback()
    doc = definition("text", {"url": world.server.url("/text"), "success": 'response.body == "plain words"'})
    shown = world.run(doc)
    assert shown["status"] == "completed"
    assert shown["output"]["body"] == "plain words"


def test_a_500_is_retried_with_the_same_idempotency_key_until_it_succeeds(world: World) -> None:
    """Two 500s then a 200: three attempts, the same Idempotency-Key on each, the run completes."""
    world.allow_loopback()
    shown = world.run(definition("flaky", {"method": "POST", "url": world.server.url("/flaky/2")}))
    assert shown["status"] == "completed", shown
    keys = {s.headers["Idempotency-Key"] for s in world.server.seen}
    assert len(world.server.seen) == 3
    assert len(keys) == 1
    failed = [e for e in _attempts(world, shown["run_id"]) if e["type"] == "ActivityFailed"]
    assert [e["data"]["error"]["code"] for e in failed] == ["HttpStatus500", "HttpStatus500"]


def test_a_lost_answer_is_retried_with_the_same_key_and_applied_once(world: World) -> None:
    """The server applies the request and drops the connection: the retry carries the same key, the
    server sees the key twice and applies the effect once."""
    world.allow_loopback()
    doc = definition("drop", {"method": "POST", "url": world.server.url("/apply-then-drop")})
    shown = world.run(doc)
    assert shown["status"] == "completed", shown
    ((key, seen),) = world.server.keys.items()
    assert seen == 2
    assert world.server.applied[key] == 1
    assert shown["output"]["body"] == {"applied": 1}
    failed = [e for e in _attempts(world, shown["run_id"]) if e["type"] == "ActivityFailed"]
    assert failed[0]["data"]["error"]["code"] == "HttpConnectionError"


def test_a_4xx_is_not_retried_and_fails_the_step_with_its_status_code(world: World) -> None:
    """A 404 is the request's fault: one attempt, code HttpStatus404, the run fails."""
    world.allow_loopback()
    shown = world.run(definition("missing", {"url": world.server.url("/status/404")}))
    assert shown["status"] == "failed"
    assert len(world.server.seen) == 1
    assert shown["error"]["code"] == "HttpStatus404"


def test_a_slow_server_times_out_and_an_oversize_answer_is_refused(world: World) -> None:
    """The step's timeout bounds the whole request; a body over max_response_bytes is refused."""
    world.allow_loopback()
    once = {"max_attempts": 1}
    slow = definition("slow", {"url": world.server.url("/slow"), "timeout": "1s", "retry": once})
    shown = world.run(slow)
    assert shown["status"] == "failed"
    assert shown["error"]["code"] == "HttpTimeout", shown["error"]
    big = definition("big", {"url": world.server.url("/big"), "max_response_bytes": 10_000})
    shown = world.run(big)
    assert shown["status"] == "failed"
    assert shown["error"]["code"] == "HttpResponseTooLarge"
    assert "max_response_bytes" in shown["error"]["message"]


def test_http_steps_run_in_parallel_branches_and_for_each_bodies(world: World) -> None:
    """Each branch's and each item's request is its own attempt, with its own idempotency key."""
    world.allow_loopback()
    ok = world.server.url("/ok")
    doc = {
        "name": "shapes",
        "steps": [
            {
                "id": "both",
                "parallel": {
                    "branches": {
                        "left": [{"id": "l", "http": {"method": "POST", "url": ok, "body": {"b": "left"}}}],
                        "right": [{"id": "r", "http": {"method": "POST", "url": ok, "body": {"b": "right"}}}],
                    }
                },
            },
            {
                "id": "each",
                "for_each": {
                    "items": "${input.items}",
                    "body": [{"id": "one", "http": {"method": "POST", "url": ok, "body": {"i": "${item}"}}}],
                },
            },
        ],
    }
    shown = world.run(doc, {"items": [1, 2, 3]})
    assert shown["status"] == "completed", shown
    bodies = sorted(json.dumps(json.loads(s.body), sort_keys=True) for s in world.server.seen)
    assert bodies == sorted(['{"b": "left"}', '{"b": "right"}', '{"i": 1}', '{"i": 2}', '{"i": 3}'])
    assert len(world.server.keys) == 5  # one idempotency key per branch step and per item
    assert shown["output"][0]["body"]["got"] == {"i": 1}  # the for-each output: the items' responses
