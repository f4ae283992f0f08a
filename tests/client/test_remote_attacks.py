"""Attacks on remote workers and the client, against a real `lockstep serve` (SQLite): another tenant's
worker key, a key of the wrong role, ids that try to reach another route, a key sent in clear text.
Each must be refused and change nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from lockstep.client import Client
from lockstep.errors import Forbidden, InvalidInput, NotFound
from lockstep.runtime.activity import Registry
from lockstep.runtime.remote import RemoteWorker

from .serverkit import TENANT, Server, one_step, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("remote-attacks")
    s = Server(tmp, f"sqlite:///{tmp / 'lockstep.db'}")
    try:
        s.publish(one_step("pay"))
        svc = s.engine.service
        svc.principals.create_tenant("evil")
        key = svc.principals.create_user("evil", "mallory", ["worker"], []).api_key
        assert key is not None
        s.keys["evil-worker"] = key
        yield s.up()
    finally:
        s.shutdown()


def _history(s: Server, run_id: str) -> list[str]:
    return [e["type"] for e in s.engine.events(run_id, tenant=TENANT)]


def test_another_tenants_worker_key_gets_nothing_and_changes_nothing(server: Server) -> None:
    """A worker key of tenant evil polls acme's activity type and gets no task; with acme's real task
    id and fencing token it can neither heartbeat nor complete it (404): acme's run is unchanged and
    the lease stays with acme's worker, which completes it."""
    s = server
    run = s.engine.start("pay", input={"order": 1}, tenant=TENANT)
    with (
        Client(s.url, api_key=s.keys["evil-worker"]) as evil,
        Client(s.url, api_key_file=s.key_files["worker"]) as mine,
    ):
        assert evil.poll_tasks(["test.step"], wait_seconds=0.5, max_tasks=10) == []
        (task,) = wait_until(lambda: mine.poll_tasks(["test.step"], wait_seconds=1), 30, "acme's task")
        before = _history(s, run)
        assert evil.heartbeat(task.task_id, task.fencing_token) is False
        with pytest.raises(NotFound):
            evil.complete_task(task.task_id, task.attempt, task.fencing_token, {"stolen": True})
        with pytest.raises(NotFound):
            evil.fail_task(task.task_id, task.attempt, task.fencing_token, "Evil", retryable=False)
        assert _history(s, run) == before
        mine.complete_task(task.task_id, task.attempt, task.fencing_token, {"ok": True})
    assert s.engine.show(run, tenant=TENANT)["output"] == {"ok": True}


def test_a_worker_key_reads_no_runs_and_a_viewer_key_runs_no_activity(server: Server) -> None:
    """A worker key may not read or start runs (403); a remote worker given a viewer's key is refused
    every poll (403, logged, retried with backoff) and never runs an activity."""
    s = server
    with Client(s.url, api_key_file=s.key_files["worker"]) as worker:
        with pytest.raises(Forbidden):
            worker.get("anything-at-all")
        with pytest.raises(Forbidden):
            worker.start("pay", {"order": 2})
    called = threading.Event()
    registry = Registry()

    def step(_input: Any) -> dict[str, Any]:
        called.set()
        return {}

    registry.register("test.step", step)
    run = s.engine.start("pay", input={"order": 3}, tenant=TENANT)
    viewer = Client(s.url, api_key_file=s.key_files["viewer"])
    rw = RemoteWorker(viewer, registry, lease_ttl=timedelta(seconds=5), poll_wait=timedelta(seconds=0.5))
    rw.start()
    try:
        time.sleep(2.0)  # several polls, each refused
        assert not called.is_set()
        assert "ActivityStarted" not in _history(s, run)
    finally:
        assert rw.stop(5)
        viewer.close()
    s.engine.cancel(run, reason="test over", tenant=TENANT)


def test_ids_cannot_reach_another_route(server: Server) -> None:
    """A run id with a `/` or a dot segment (which the server would route elsewhere once decoded) is
    refused by the client before anything is sent; so is a task id with an empty or dot segment."""
    with Client(server.url, api_key_file=server.key_files["operator"]) as op:
        for bad in ("x/events", "../approvals/inbox", "..", ""):
            with pytest.raises(InvalidInput, match="run id"):
                op.get(bad)
            with pytest.raises(InvalidInput):
                op.cancel(bad, "reason")
    with Client(server.url, api_key_file=server.key_files["worker"]) as worker:
        for bad in ("run/../../runs/x", "run//a1"):
            with pytest.raises(InvalidInput, match="task id"):
                worker.complete_task(bad, 1, 1, {})


def test_a_key_is_not_sent_in_clear_text_by_default() -> None:
    """http:// to a host that is not loopback is refused (the bearer key would travel in clear) unless
    the caller allows it explicitly."""
    with pytest.raises(InvalidInput, match="clear"):
        Client("http://lockstep.example", api_key="k")
    Client("http://lockstep.example", api_key="k", allow_http=True).close()
    Client("https://lockstep.example", api_key="k").close()
