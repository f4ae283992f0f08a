"""The fault suite's TCP proxy: forwards both ways, cuts and heals, adds latency, stops without leaks."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import closing, suppress
from typing import TypeVar

import pytest

from lab.faults.proxy import Proxy
from lab.fleet import wait_until

T = TypeVar("T")


class EchoServer:
    """Sends back whatever it receives, one thread per connection; stop() joins them all."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)  # the accept loop's chance to notice stop()
        self.port = self.listener.getsockname()[1]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, name="echo-accept")]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            with self._lock:
                self._conns.append(conn)
                thread = threading.Thread(target=self._echo, args=(conn,), name="echo-conn")
                self._threads.append(thread)
            thread.start()

    def _echo(self, conn: socket.socket) -> None:
        with suppress(OSError):
            while data := conn.recv(65536):
                conn.sendall(data)
        with suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        self._stop.set()
        self._threads[0].join()
        with self._lock:
            conns, threads = list(self._conns), list(self._threads[1:])
        for conn in conns:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join()
        for conn in conns:
            conn.close()
        self.listener.close()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[Proxy]:
    p = Proxy("127.0.0.1", echo.port)
    p.start()
    try:
        yield p
    finally:
        p.stop()


def connect(proxy: Proxy) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def is_closed(sock: socket.socket) -> bool:
    """True once the peer has closed: recv gives EOF or a reset (timeout 10 s from connect())."""
    try:
        return sock.recv(1) == b""
    except ConnectionError:
        return True


def round_trip(sock: socket.socket, payload: bytes) -> bytes:
    sock.sendall(payload)
    return recv_exactly(sock, len(payload))


def test_forwards_bytes_both_ways(proxy: Proxy) -> None:
    """Bytes sent through the proxy reach the target and its answer comes back, large or small."""
    with closing(connect(proxy)) as sock:
        assert round_trip(sock, b"hello") == b"hello"
        big = bytes(range(256)) * 4096  # 1 MiB: many chunks each way
        sender = threading.Thread(target=sock.sendall, args=(big,))
        sender.start()
        assert recv_exactly(sock, len(big)) == big
        sender.join()
        assert proxy.connections == 1


def test_a_peer_closing_closes_the_pair(proxy: Proxy, echo: EchoServer) -> None:
    """When either side closes, the proxy closes the other side and forgets the connection."""
    with closing(connect(proxy)) as sock:
        assert round_trip(sock, b"x") == b"x"
    wait_until(lambda: proxy.connections == 0)
    with closing(connect(proxy)) as sock:
        assert round_trip(sock, b"y") == b"y"
        echo.stop()  # the target side goes away
        assert is_closed(sock)
    wait_until(lambda: proxy.connections == 0)


def test_cut_breaks_open_connections_and_refuses_new_ones(proxy: Proxy) -> None:
    """cut() closes every open connection and accepts-then-closes new ones until heal()."""
    socks = [connect(proxy) for _ in range(3)]
    try:
        for sock in socks:
            assert round_trip(sock, b"ping") == b"ping"
        wait_until(lambda: proxy.connections == 3)
        proxy.cut()
        assert all(is_closed(sock) for sock in socks)
        wait_until(lambda: proxy.connections == 0)
        with closing(connect(proxy)) as refused:
            assert is_closed(refused)
        assert proxy.connections == 0
    finally:
        for sock in socks:
            sock.close()


def test_heal_restores_forwarding(proxy: Proxy) -> None:
    """After heal(), new connections are forwarded again."""
    proxy.cut()
    with closing(connect(proxy)) as refused:
        assert is_closed(refused)
    proxy.heal()
    with closing(connect(proxy)) as sock:
        assert round_trip(sock, b"again") == b"again"


def test_delay_adds_latency_each_way(proxy: Proxy) -> None:
    """set_delay(ms) holds each chunk at least ms in each direction (a round trip takes twice that)."""
    with closing(connect(proxy)) as sock:
        assert round_trip(sock, b"warm") == b"warm"
        proxy.set_delay(150)
        started = time.monotonic()
        assert round_trip(sock, b"slow") == b"slow"
        assert time.monotonic() - started >= 0.3
        proxy.set_delay(0)
        assert round_trip(sock, b"fast") == b"fast"
    with pytest.raises(ValueError, match=">= 0"):
        proxy.set_delay(-1)


def test_cut_does_not_wait_for_a_delayed_chunk(proxy: Proxy) -> None:
    """A chunk held by a long delay is abandoned at once when the connection is cut."""
    proxy.set_delay(60_000)
    with closing(connect(proxy)) as sock:
        sock.sendall(b"held")
        wait_until(lambda: proxy.connections == 1)
        proxy.cut()
        assert is_closed(sock)
    wait_until(lambda: proxy.connections == 0)


def test_unreachable_target_closes_the_client() -> None:
    """With nothing listening at the target, the client's connection is closed, not left hanging."""
    with closing(socket.create_server(("127.0.0.1", 0))) as placeholder:
        dead_port = placeholder.getsockname()[1]
    with Proxy("127.0.0.1", dead_port) as proxy, closing(connect(proxy)) as sock:
        assert is_closed(sock)
        assert proxy.connections == 0


def test_stop_closes_everything_and_leaves_no_threads(echo: EchoServer) -> None:
    """stop() closes open connections and returns only after every proxy thread has exited."""
    before = set(threading.enumerate())
    proxy = Proxy("127.0.0.1", echo.port)
    port = proxy.start()
    socks = [connect(proxy) for _ in range(4)]
    try:
        for sock in socks:
            assert round_trip(sock, b"x") == b"x"
        proxy.stop()
        leftovers = [t for t in threading.enumerate() if t not in before and not t.name.startswith("echo")]
        assert leftovers == []
        assert proxy.connections == 0
        assert all(is_closed(sock) for sock in socks)
    finally:
        for sock in socks:
            sock.close()
    with (
        pytest.raises(ConnectionRefusedError),
        closing(socket.create_connection(("127.0.0.1", port), timeout=2)),
    ):
        pass
