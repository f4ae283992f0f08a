"""The fake payment API of the fault suite: Stripe-style idempotency, injected faults, the ledger, the CLI."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from lab.faults.downstream import Downstream, LedgerReader
from lab.fleet import wait_until

T = TypeVar("T")
BODY = {"run_id": "r1", "step": "charge", "amount": 500}


@pytest.fixture
def downstream(tmp_path: Path) -> Iterator[Downstream]:
    ds = Downstream(tmp_path / "ledger.db")
    ds.start()
    try:
        yield ds
    finally:
        ds.stop()


@pytest.fixture
def client(downstream: Downstream) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=downstream.url, timeout=10) as c:
        yield c


@pytest.fixture
def ledger(downstream: Downstream) -> LedgerReader:
    return LedgerReader(downstream.ledger_path)


def effect(
    client: httpx.Client, key: str, body: dict[str, Any] | None = None, kind: str = "charge", attempt: int = 1
) -> httpx.Response:
    headers = {"Idempotency-Key": key, "X-Attempt": str(attempt)}
    return client.post(f"/effects/{kind}", json=BODY if body is None else body, headers=headers)


def test_first_use_of_a_key_applies_the_effect(client: httpx.Client, ledger: LedgerReader) -> None:
    """A new key applies the effect once and answers 201 with the saved response."""
    resp = effect(client, "k1", attempt=3)
    assert resp.status_code == 201
    assert resp.json() == {
        "id": "charge_1",
        "kind": "charge",
        "run_id": "r1",
        "step": "charge",
        "amount": 500,
    }
    assert "Idempotent-Replayed" not in resp.headers
    [row] = ledger.effects()
    assert row["idempotency_key"] == "k1"
    assert (row["kind"], row["run_id"], row["step"], row["attempt"]) == ("charge", "r1", "charge", 3)
    assert row["response"] == resp.json()
    [req] = ledger.requests()
    assert (req["outcome"], req["status"], req["attempt"]) == ("applied", 201, 3)
    assert effect(client, "k2", kind="refund").json()["id"] == "refund_1"
    assert effect(client, "k3").json()["id"] == "charge_2"


def test_same_key_same_body_replays_the_saved_response(client: httpx.Client, ledger: LedgerReader) -> None:
    """The same key and body (in any key order) answers 200, Idempotent-Replayed, same id, nothing new."""
    first = effect(client, "k1")
    again = effect(client, "k1", dict(reversed(BODY.items())), attempt=2)
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert len(ledger.effects()) == 1
    assert [r["outcome"] for r in ledger.requests()] == ["applied", "replayed"]


def test_same_key_with_a_different_body_or_kind_is_refused(
    client: httpx.Client, ledger: LedgerReader
) -> None:
    """A reused key with another body or another kind is 409 idempotency_key_reuse and applies nothing."""
    effect(client, "k1")
    for resp in (effect(client, "k1", {**BODY, "amount": 501}), effect(client, "k1", kind="refund")):
        assert resp.status_code == 409
        assert resp.json()["error"] == "idempotency_key_reuse"
    [row] = ledger.effects()
    assert row["response"]["amount"] == 500
    assert [r["outcome"] for r in ledger.requests()] == ["applied", "key_reuse", "key_reuse"]


def test_concurrent_requests_with_one_key_apply_once(client: httpx.Client, ledger: LedgerReader) -> None:
    """Many simultaneous requests with one key: exactly one applies, all the others replay it."""
    n = 16
    barrier = threading.Barrier(n)

    def send(_: int) -> httpx.Response:
        barrier.wait()
        return effect(client, "same-key")

    with ThreadPoolExecutor(n) as pool:
        responses = list(pool.map(send, range(n)))
    assert sorted(r.status_code for r in responses) == [200] * (n - 1) + [201]
    assert {r.json()["id"] for r in responses} == {"charge_1"}
    assert len(ledger.effects()) == 1
    assert sorted(r["outcome"] for r in ledger.requests()) == ["applied"] + ["replayed"] * (n - 1)


def test_injected_failure_answers_503_before_applying(client: httpx.Client, ledger: LedgerReader) -> None:
    """fail_rate=1 answers 503 injected_failure and applies nothing; after a reset the key applies."""
    assert client.post("/control", json={"fail_rate": 1.0}).status_code == 200
    resp = effect(client, "k1")
    assert resp.status_code == 503
    assert resp.json()["error"] == "injected_failure"
    assert ledger.effects() == []
    assert [(r["outcome"], r["status"]) for r in ledger.requests()] == [("failed", 503)]
    client.post("/control", json={"reset": True}).raise_for_status()
    assert effect(client, "k1").status_code == 201


def test_dropped_response_applies_the_effect_and_closes_the_connection(
    client: httpx.Client, ledger: LedgerReader
) -> None:
    """drop_rate=1: the client gets a connection error, the effect is applied, a retry gets the saved one."""
    client.post("/control", json={"drop_rate": 1}).raise_for_status()
    with pytest.raises(httpx.RemoteProtocolError):
        effect(client, "k1")
    [row] = ledger.effects()
    assert [(r["outcome"], r["status"]) for r in ledger.requests()] == [("dropped", 201)]
    client.post("/control", json={"drop_rate": 0}).raise_for_status()
    retry = effect(client, "k1", attempt=2)
    assert retry.status_code == 200
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.json() == row["response"]
    assert len(ledger.effects()) == 1


def test_delay_holds_the_answer(client: httpx.Client) -> None:
    """delay_ms holds each /effects answer at least that long."""
    client.post("/control", json={"delay_ms": 300}).raise_for_status()
    started = time.monotonic()
    assert effect(client, "k1").status_code == 201
    assert time.monotonic() - started >= 0.3


def test_control_updates_a_subset_and_resets(client: httpx.Client) -> None:
    """POST /control changes only the given settings; GET shows them; reset restores the defaults."""
    defaults = {"delay_ms": 0, "fail_rate": 0.0, "drop_rate": 0.0, "seed": 0}
    assert client.get("/control").json() == defaults
    client.post("/control", json={"fail_rate": 0.25, "seed": 9}).raise_for_status()
    client.post("/control", json={"delay_ms": 5}).raise_for_status()
    assert client.get("/control").json() == {"delay_ms": 5, "fail_rate": 0.25, "drop_rate": 0.0, "seed": 9}
    assert client.post("/control", json={"reset": True}).json() == defaults


def test_same_seed_same_faults(client: httpx.Client) -> None:
    """A seed makes the injected failures reproducible for the same request order."""

    def pattern(prefix: str) -> list[int]:
        client.post("/control", json={"seed": 42, "fail_rate": 0.5}).raise_for_status()
        return [effect(client, f"{prefix}-{i}").status_code for i in range(20)]

    first = pattern("a")
    assert set(first) == {201, 503}
    assert pattern("b") == first


def test_notifications_round_trip(client: httpx.Client, ledger: LedgerReader) -> None:
    """POST /notify stores the body (204); GET /notifications and the ledger give it back parsed."""
    bodies = [{"run_id": "r1", "link": "http://x/approve?t=1"}, {"n": 2}]
    for body in bodies:
        resp = client.post("/notify", json=body)
        assert resp.status_code == 204
        assert resp.content == b""
    assert client.get("/notifications").json() == bodies
    assert [n["body"] for n in ledger.notifications()] == bodies


@pytest.mark.parametrize(
    ("method", "path", "headers", "content", "status"),
    [
        ("POST", "/effects/charge", {}, b'{"run_id": "r", "step": "s"}', 400),  # no Idempotency-Key
        ("POST", "/effects/charge", {"Idempotency-Key": "k"}, b"{not json", 400),
        ("POST", "/effects/charge", {"Idempotency-Key": "k"}, b"[1, 2]", 400),
        ("POST", "/effects/charge", {"Idempotency-Key": "k"}, b'{"run_id": "r"}', 400),
        ("POST", "/effects/charge", {"Idempotency-Key": "k"}, b'{"run_id": 1, "step": "s"}', 400),
        ("POST", "/effects/charge", {"Idempotency-Key": "k", "X-Attempt": "two"}, b"{}", 400),
        ("POST", "/effects/Bad-Kind", {"Idempotency-Key": "k"}, b'{"run_id": "r", "step": "s"}', 400),
        ("GET", "/effects/charge", {}, b"", 405),
        ("DELETE", "/health", {}, b"", 405),
        ("BREW", "/health", {}, b"", 405),
        ("GET", "/nowhere", {}, b"", 404),
        ("POST", "/control", {}, b'{"fail_rate": 2}', 400),
        ("POST", "/control", {}, b'{"delay_ms": "slow"}', 400),
        ("POST", "/control", {}, b'{"colour": "red"}', 400),
        ("POST", "/notify", {}, b"{nope", 400),
    ],
)
def test_bad_input_is_a_json_4xx(
    client: httpx.Client,
    ledger: LedgerReader,
    method: str,
    path: str,
    headers: dict[str, str],
    content: bytes,
    status: int,
) -> None:
    """Bad input, a wrong method or an unknown path is a 4xx with a JSON error, and applies nothing."""
    resp = client.request(method, path, headers=headers, content=content)
    assert resp.status_code == status
    assert resp.headers["Content-Type"] == "application/json"
    assert resp.json()["error"]
    assert ledger.effects() == []
    assert client.get("/control").json()["fail_rate"] == 0.0
    if method == "POST" and path.startswith("/effects/"):
        assert [r["outcome"] for r in ledger.requests()] == ["bad_request"]


def test_ledger_reader_does_not_create_a_missing_ledger(tmp_path: Path) -> None:
    """Reading a ledger that does not exist fails instead of creating an empty file."""
    with pytest.raises(sqlite3.OperationalError):
        LedgerReader(tmp_path / "missing.db").effects()
    assert not (tmp_path / "missing.db").exists()


def test_cli_writes_its_port_file_and_stops_on_sigterm(tmp_path: Path) -> None:
    """The CLI serves, publishes its port atomically, is readable from another process, exits 0 on SIGTERM."""
    port_file = tmp_path / "run" / "downstream.port"
    port_file.parent.mkdir()
    argv = [sys.executable, "-m", "lab.faults.downstream", "--ledger", str(tmp_path / "ledger.db")]
    with subprocess.Popen(
        [*argv, "--port-file", str(port_file)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            port = int(wait_until(lambda: port_file.exists() and port_file.read_text().strip(), 20))
            assert [p.name for p in port_file.parent.iterdir()] == ["downstream.port"]
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
                assert c.get("/health").json() == {"ok": True}
                assert effect(c, "k1").status_code == 201
            assert [e["idempotency_key"] for e in LedgerReader(tmp_path / "ledger.db").effects()] == ["k1"]
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 0, err
    assert out.strip() == f"downstream listening on http://127.0.0.1:{port}"
    assert err == ""
