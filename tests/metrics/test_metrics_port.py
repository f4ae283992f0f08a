"""The trust boundary of `worker`/`scheduler --metrics-port`, as attacks on real processes: listening
beyond loopback without the metrics token is refused at start (nothing listens); with a token, a scrape
without it, with a wrong one or another scheme gets 401 and not a byte of metrics; only GET /metrics
answers."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from lab.fleet import Fleet, free_port

pytestmark = pytest.mark.slow

SOURCE = """
from lockstep import activity


@activity("p.noop")
def noop(data, ctx):
    return {}
"""
SECRET = "a-long-random-metrics-token-0123"  # noqa: S105 - a test value


def _fleet(tmp_path: Path) -> Fleet:
    (tmp_path / "port_activities.py").write_text(SOURCE)
    url = f"sqlite:///{tmp_path / 'lockstep.db'}"
    return Fleet(tmp_path / "fleet", url, activities="port_activities", pythonpath=[tmp_path])


def _outside_address() -> str:
    """An address of this host that is not loopback (the one a route to the outside leaves from)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent, the kernel only picks a route
        return str(s.getsockname()[0])


@pytest.mark.parametrize("kind", ["worker", "scheduler"])
def test_listening_beyond_loopback_without_a_token_is_refused(tmp_path: Path, kind: str) -> None:
    """--metrics-host 0.0.0.0 without --metrics-token: exit status 2, the reason and the fix in one
    line, and the port never opens."""
    fleet = _fleet(tmp_path)
    port = free_port()
    try:
        args = ["--metrics-port", str(port), "--metrics-host", "0.0.0.0"]  # noqa: S104 - the attack
        proc = (
            fleet.worker("w1", extra=args, wait=False)
            if kind == "worker"
            else fleet.scheduler("s1", extra=args, wait=False)
        )
        assert proc.wait(60) == 2
        log = proc.log()
        assert "without a metrics token would show every tenant's counters" in log
        assert "--metrics-token" in log
        assert "Traceback" not in log
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
    finally:
        fleet.shutdown()


def test_a_token_guards_the_endpoint_on_every_address(tmp_path: Path) -> None:
    """A worker on 0.0.0.0 with a token: reached from outside loopback, no credentials, a wrong token,
    a Basic header or the token as a query parameter get 401 without metrics; the token gets them; any
    other path is 404 and any other method 405."""
    fleet = _fleet(tmp_path)
    port = free_port()
    try:
        args = ["--metrics-port", str(port), "--metrics-host", "0.0.0.0", "--metrics-token", SECRET]  # noqa: S104
        proc = fleet.worker("w1", extra=args)
        assert f"metrics on http://0.0.0.0:{port}/metrics" in proc.log()
        base = f"http://{_outside_address()}:{port}"
        for headers, url in (
            ({}, "/metrics"),
            ({"Authorization": "Bearer wrong"}, "/metrics"),
            ({"Authorization": f"Basic {SECRET}"}, "/metrics"),
            ({"Authorization": f"Bearer {SECRET[:-1]}"}, "/metrics"),
            ({}, f"/metrics?token={SECRET}"),
        ):
            r = httpx.get(base + url, headers=headers, timeout=10)
            assert r.status_code == 401, (headers, url)
            assert "lockstep_" not in r.text
            assert r.headers["www-authenticate"].startswith("Bearer")
        good = {"Authorization": f"Bearer {SECRET}"}
        r = httpx.get(f"{base}/metrics", headers=good, timeout=10)
        assert r.status_code == 200
        assert "# TYPE lockstep_activity_attempts_total counter" in r.text
        assert "# TYPE lockstep_runs " not in r.text  # the database's gauges are serve's
        assert httpx.get(f"{base}/", headers=good, timeout=10).status_code == 404
        assert httpx.post(f"{base}/metrics", headers=good, timeout=10).status_code == 405
    finally:
        fleet.shutdown()


def test_loopback_without_a_token_serves_the_host(tmp_path: Path) -> None:
    """The default: 127.0.0.1, open to processes on this host (the scheduler's counters)."""
    fleet = _fleet(tmp_path)
    port = free_port()
    try:
        fleet.scheduler("s1", extra=["--metrics-port", str(port)])
        r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/plain")
        assert "# TYPE lockstep_timer_fire_lag_seconds histogram" in r.text
    finally:
        fleet.shutdown()
