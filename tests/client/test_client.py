"""lockstep.client against a real `lockstep serve` on loopback (SQLite): every call end to end, typed
answers, and every error answer as a lockstep.errors class with the server's message."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import msgspec
import pytest

from lab.fleet import free_port
from lockstep.client import AsyncClient, Client, Run, WaitTimedOut
from lockstep.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    LockstepError,
    NotFound,
    RateLimited,
    Refused,
    Unauthenticated,
    Unavailable,
)

from .serverkit import Server, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

DEFINITIONS = [
    {"name": "nap", "steps": [{"id": "nap", "wait": "200ms"}]},
    {"name": "hold", "steps": [{"id": "nap", "wait": "1h"}]},
    {
        "name": "sign-off",
        "steps": [
            {"id": "review", "approval": {"approvers": {"users": ["u-approver"]}, "timeout": "1d"}},
            {"id": "done", "succeed": {"output": {"ok": True}}},
        ],
    },
    {
        "name": "parcel",
        "steps": [
            {
                "id": "delivered",
                "wait_event": {"name": "parcel-delivered", "key": "${input.no}", "timeout": "1d"},
            }
        ],
    },
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("client")
    s = Server(tmp, f"sqlite:///{tmp / 'lockstep.db'}")
    try:
        for d in DEFINITIONS:
            s.publish(d)
        svc = s.engine.service
        svc.principals.create_tenant("slow")
        svc.principals.set_tenant("slow", starts_per_second=0.01)  # a burst of one start
        s.keys["slow"] = str(svc.principals.create_user("slow", "op", ["operator"], []).api_key)
        s.engine.publish(DEFINITIONS[1], tenant="slow")
        yield s.up()
    finally:
        s.shutdown()


@pytest.fixture
def op(server: Server) -> Iterator[Client]:
    with Client(server.url, api_key_file=server.key_files["operator"], timeout=30) as c:
        yield c


def test_start_get_and_wait_until_completed(op: Client) -> None:
    """start returns the run id, a second start with the same key the same run (created False); wait
    polls until the run completed and returns it typed."""
    first = op.start("nap", {"n": 1}, key="nap-1")
    again = op.start("nap", {"n": 1}, key="nap-1")
    assert first.created
    assert not again.created
    assert again.run_id == first.run_id
    run = op.wait(first.run_id, timeout=30)
    assert isinstance(run, Run)
    assert run.status == "completed"
    assert run.terminal
    assert run.steps["nap"].status == "succeeded"
    assert run.input == {"n": 1}
    assert run.definition.name == "nap"
    assert run.start_key == "nap-1"


def test_wait_returns_at_an_approval_and_times_out_on_a_timer(op: Client, server: Server) -> None:
    """wait returns once the run waits for a person; on a run that only waits for an hour's timer it
    raises WaitTimedOut (a lockstep error) after the timeout, having polled a bounded number of times."""
    run = op.wait(op.start("sign-off").run_id, timeout=30)
    assert run.status == "waiting"
    assert run.wait_kind == "approval"
    held = op.start("hold").run_id
    with pytest.raises(WaitTimedOut, match="still waiting") as info:
        op.wait(held, timeout=1.0)
    assert isinstance(info.value, LockstepError)


def test_list_runs_iterates_pages_newest_first(op: Client) -> None:
    """list_runs fetches page after page (cursor pagination) and yields every run once, newest first."""
    ids = [op.start("hold", {"i": i}).run_id for i in range(5)]
    page = op.runs_page(definition="hold", limit=2)
    assert len(page.items) == 2
    assert page.next_cursor is not None
    listed = [r.run_id for r in op.list_runs(definition="hold", page_size=2)]
    assert listed[:5] == list(reversed(ids))
    assert len(listed) == len(set(listed))
    assert [r.run_id for r in op.list_runs(definition="hold", page_size=2, limit=3)] == listed[:3]
    assert all(r.status == "waiting" for r in op.list_runs(status="waiting", page_size=100))


def test_cancel_and_the_errors_of_a_finished_run(op: Client) -> None:
    """cancel answers typed; cancelling it again once it ended is Refused (as in-process) carrying the
    server's problem (its message, code and status), never an httpx exception."""
    run_id = op.start("hold").run_id
    result = op.cancel(run_id, "customer asked")
    assert result.run_id == run_id
    assert result.accepted
    assert op.wait(run_id, timeout=30).status == "cancelled"
    with pytest.raises(Refused) as info:
        op.cancel(run_id, "again")
    assert info.value.extra["status"] == 409
    assert str(info.value)
    assert not isinstance(info.value, httpx.HTTPError)


def test_error_answers_map_to_lockstep_errors(op: Client, server: Server) -> None:
    """404, 403, 401, 422 and no answer at all each raise their lockstep.errors class with the
    server's message."""
    with pytest.raises(NotFound, match="no-such-run"):
        op.get("no-such-run")
    with pytest.raises(NotFound):
        op.start("no-such-definition")
    with Client(server.url, api_key=server.keys["viewer"]) as viewer, pytest.raises(Forbidden):
        viewer.start("nap")
    with Client(server.url, api_key="lsk_not_a_key") as nobody, pytest.raises(Unauthenticated):
        nobody.get("x")
    with pytest.raises(InvalidInput, match="reason"):
        op.cancel(op.start("hold").run_id, "")
    gone = Client(f"http://127.0.0.1:{free_port()}", api_key="k", timeout=2)
    with gone, pytest.raises(Unavailable) as info:
        gone.get("x")
    assert info.value.code == "unreachable"


def test_over_the_tenants_start_rate_is_rate_limited(server: Server) -> None:
    """A 429 raises RateLimited with the server's Retry-After in `retry_after`."""
    with Client(server.url, api_key=server.keys["slow"]) as slow:
        slow.start("hold")
        with pytest.raises(RateLimited) as info:
            slow.start("hold")
    assert info.value.retry_after >= 1
    assert info.value.extra["status"] == 429


def test_bad_settings_are_refused_before_any_request(tmp_path: Path) -> None:
    """A URL that is not http(s), an empty or missing key file, or both a key and a file: InvalidInput."""
    with pytest.raises(InvalidInput, match="not a server URL"):
        Client("lockstep.example")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(InvalidInput, match="empty"):
        Client("http://127.0.0.1:1", api_key_file=tmp_path / "empty")
    with pytest.raises(InvalidInput, match="cannot read"):
        Client("http://127.0.0.1:1", api_key_file=tmp_path / "missing")
    with pytest.raises(InvalidInput, match="not both"):
        Client("http://127.0.0.1:1", api_key="a", api_key_file=tmp_path / "empty")


def test_events_are_paginated_in_order(op: Client) -> None:
    """events yields the whole history in sequence order, a page at a time, and from after_seq on."""
    run_id = op.start("nap").run_id
    op.wait(run_id, timeout=30)
    events = list(op.events(run_id, page_size=2))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert len(events) >= 3
    assert events[0].type == "RunStarted"
    assert events[-1].type == "RunCompleted"
    assert [e.seq for e in op.events(run_id, after_seq=2)] == [e.seq for e in events[2:]]


def test_repair_commands(op: Client) -> None:
    """pause and resume answer with the events they recorded; a retry of a step that does not wait for
    an operator is refused with the state machine's reason (409)."""
    run_id = op.start("hold").run_id
    paused = op.pause(run_id, "maintenance")
    assert paused.run_id == run_id
    assert paused.events
    assert paused.status == "paused"
    assert op.get(run_id).status == "paused"
    resumed = op.resume(run_id, "done")
    assert resumed.status != "paused"
    with pytest.raises(Refused):  # the state machine's refusal, as in-process
        op.retry(run_id, "nap", "nothing to retry")


def test_inbox_and_decide_by_request_id(op: Client, server: Server) -> None:
    """The approver's inbox lists the request; deciding it by request id records the decision and the
    run moves on to completion."""
    run_id = op.start("sign-off").run_id
    op.wait(run_id, timeout=30)
    with Client(server.url, api_key_file=server.key_files["approver"]) as approver:
        item = wait_until(
            lambda: next((i for i in approver.inbox() if i.run_id == run_id), None), 30, "the request"
        )
        decided = approver.decide(item.request_id, "approve", comment="fine")
        assert decided.run_id == run_id
        assert decided.decision == "approve"
        with pytest.raises(Conflict):
            approver.decide(item.request_id, "approve")
    assert op.wait(run_id, timeout=30).status == "completed"


def test_publish_event_reaches_the_waiting_run(op: Client, server: Server) -> None:
    """publish_event (a publisher's key) delivers to the run waiting on that name and key; a resend
    of its id gets the first answer again."""
    run_id = op.start("parcel", {"no": "P-1"}).run_id
    op.wait(run_id, timeout=30)
    with Client(server.url, api_key_file=server.key_files["publisher"]) as pub:
        sent = pub.publish_event("parcel-delivered", "P-1", "evt-1", {"at": "door"})
        assert sent.delivered_to == [run_id]
        assert pub.publish_event("parcel-delivered", "P-1", "evt-1", {"at": "door"}).replay
    run = op.wait(run_id, timeout=30)
    assert run.status == "completed"
    assert run.steps["delivered"].output == {"at": "door"}


def test_answers_are_plain_json_again(op: Client) -> None:
    """msgspec.to_builtins gives an answer back as the JSON the API sent (what the CLI prints)."""
    run = op.get(op.start("hold").run_id)
    plain = msgspec.to_builtins(run)
    assert plain["run_id"] == run.run_id
    assert plain["definition"]["name"] == "hold"


def test_async_client(server: Server) -> None:
    """AsyncClient: the same calls awaited, async iteration over pages, and the same error classes."""

    async def main() -> None:
        async with AsyncClient(server.url, api_key_file=server.key_files["operator"]) as c:
            started = await c.start("nap", key="async-1")
            assert (await c.start("nap", key="async-1")).run_id == started.run_id
            run = await c.wait(started.run_id, timeout=30)
            assert run.status == "completed"
            seqs = [e.seq async for e in c.events(run.run_id, page_size=2)]
            assert seqs == list(range(1, len(seqs) + 1))
            listed = [r.run_id async for r in c.list_runs(definition="nap", page_size=1, limit=2)]
            assert len(listed) == 2
            with pytest.raises(NotFound):
                await c.get("no-such-run")
            held = (await c.start("hold")).run_id
            assert (await c.cancel(held, "async")).accepted

    asyncio.run(main())


def test_list_runs_searches_as_the_ui_does(op: Client, server: Server) -> None:
    """list_runs and runs_page (sync and async) pass run, key, version, the start-time range (text or a
    datetime) and an input field to GET /v1/runs; a bad filter raises InvalidInput with its message."""
    a = op.start("hold", {"customer": "ZEBRA", "address": {"city": "Köln"}}, key="search-a").run_id
    b = op.start("hold", {"customer": "ZEBRA", "address": {"city": "Bonn"}}, key="search-b").run_id
    assert [r.run_id for r in op.list_runs(input="customer = ZEBRA")] == [b, a]
    assert [r.run_id for r in op.list_runs(input='address.city = "Köln"')] == [a]
    assert [r.run_id for r in op.list_runs(key="search-b", version=1)] == [b]
    assert [r.run_id for r in op.list_runs(key="search-b", version=99)] == []
    assert [r.run_id for r in op.runs_page(run=a[:32]).items] == [a]
    long_ago, later = datetime(2000, 1, 1), datetime.now(UTC) + timedelta(days=1)
    assert {r.run_id for r in op.list_runs(started_from=long_ago, key="search-a")} == {a}
    assert list(op.list_runs(started_from=later, key="search-a")) == []
    assert [r.run_id for r in op.list_runs(started_to="2000-01-01", key="search-a")] == []
    with pytest.raises(InvalidInput, match="no `=`"):
        op.runs_page(input="customer")
    with pytest.raises(InvalidInput, match="lowercase hex"):
        list(op.list_runs(run="not-hex"))

    async def main() -> list[str]:
        async with AsyncClient(server.url, api_key_file=server.key_files["operator"]) as c:
            page = await c.runs_page(input="customer=ZEBRA", limit=1)
            assert page.next_cursor is not None
            return [r.run_id async for r in c.list_runs(input="customer = ZEBRA", page_size=1)]

    assert asyncio.run(main()) == [b, a]
