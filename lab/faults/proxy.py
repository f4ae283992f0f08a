"""A TCP proxy for the fault-injection suite: put it between two processes (lockstep workers and
PostgreSQL, say) to cut their connections, refuse new ones for a while, or slow every chunk down, without
touching either process. That is how the suite makes a network partition or a slow link happen on one
machine, on demand and then undone (`heal`).

Standard library only: one thread accepts, two threads per connection pump bytes (one per direction).
A cut or a stop shuts the sockets down, which wakes every blocked pump; the last pump of a pair closes
both sockets, so no socket is closed while another thread is still using it.

Half-closes are not forwarded: when either peer closes (or fails), the whole pair is closed. PostgreSQL,
HTTP/1.1 and the other protocols the suite proxies never rely on a half-open connection.
"""

from __future__ import annotations

import selectors
import socket
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any

__all__ = ["Proxy"]

CHUNK = 64 * 1024
CONNECT_TIMEOUT_S = 5.0


class _Pair:
    """One proxied connection: the accepted client socket and the socket to the target."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.closed = threading.Event()
        self._lock = threading.Lock()
        self._pumps_left = 2

    def shut(self) -> None:
        """Both ways, at once; idempotent, from any thread. Wakes both pumps (recv returns b"", a
        blocked sendall fails) and the peers see the connection end."""
        with self._lock:
            if self.closed.is_set():
                return
            self.closed.set()
            for sock in (self.client, self.upstream):
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def pump_done(self) -> bool:
        """Called by each pump as it exits; the last one closes the sockets. True for the last one."""
        with self._lock:
            self._pumps_left -= 1
            if self._pumps_left:
                return False
            self.client.close()
            self.upstream.close()
            return True


class Proxy:
    """Forwards 127.0.0.1:`listen_port` (0: any free port) to `target_host`:`target_port`."""

    def __init__(self, target_host: str, target_port: int, listen_port: int = 0) -> None:
        self.target = (target_host, target_port)
        self._listen_port = listen_port
        self._lock = threading.Lock()
        self._pairs: set[_Pair] = set()
        self._threads: set[threading.Thread] = set()
        self._cut = False
        self._stopping = False
        self._delay_s = 0.0
        self._listener: socket.socket | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._acceptor: threading.Thread | None = None

    # --- control -------------------------------------------------------------------------------
    def start(self) -> int:
        """Bind on 127.0.0.1, accept in a background thread; the bound port."""
        if self._listener is not None:
            raise RuntimeError("already started")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            # A proxy restarted on the same fixed port must not wait for the old one's TIME_WAITs.
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self._listen_port))
            listener.listen(128)
            listener.setblocking(False)
        except BaseException:
            listener.close()
            raise
        self._listener = listener
        # accept() cannot be interrupted by closing the socket from another thread; the acceptor
        # selects on this pair too, and stop() writes a byte to it.
        self._wake_r, self._wake_w = socket.socketpair()
        self._acceptor = threading.Thread(target=self._accept_loop, name="proxy-accept", daemon=True)
        self._acceptor.start()
        return self.port

    @property
    def port(self) -> int:
        if self._listener is None:
            raise RuntimeError("not started")
        return int(self._listener.getsockname()[1])

    @property
    def connections(self) -> int:
        """Proxied connections currently open (a cut one counts until both its pumps have exited)."""
        with self._lock:
            return len(self._pairs)

    def cut(self) -> None:
        """Close every open connection both ways, and refuse new ones (accept, then close) until heal()."""
        with self._lock:
            self._cut = True
            pairs = list(self._pairs)
        for pair in pairs:
            pair.shut()

    def heal(self) -> None:
        """Accept and forward new connections again (the cut ones stay closed)."""
        with self._lock:
            self._cut = False

    def set_delay(self, ms: float) -> None:
        """Hold every forwarded chunk `ms` milliseconds, both directions (0: none)."""
        if ms < 0:
            raise ValueError("the delay must be >= 0 ms")
        self._delay_s = ms / 1000

    def stop(self) -> None:
        """Close the listener and every connection; return once every thread of this proxy has exited."""
        with self._lock:
            if self._listener is None or self._stopping:
                return
            self._stopping = True
            pairs = list(self._pairs)
        if self._wake_w is not None:
            with suppress(OSError):
                self._wake_w.send(b"x")
        if self._acceptor is not None:
            self._acceptor.join()
        for pair in pairs:
            pair.shut()
        with self._lock:
            # Complete: with _stopping set, no thread starts and no pair registers any more.
            threads = list(self._threads)
        for thread in threads:
            thread.join()
        for sock in (self._listener, self._wake_r, self._wake_w):
            if sock is not None:
                sock.close()

    def __enter__(self) -> Proxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- threads -------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        listener, wake = self._listener, self._wake_r
        if listener is None or wake is None:
            return
        with selectors.DefaultSelector() as selector:
            selector.register(listener, selectors.EVENT_READ)
            selector.register(wake, selectors.EVENT_READ)
            while True:
                ready = {key.fileobj for key, _ in selector.select()}
                if wake in ready:
                    return
                try:
                    client, _ = listener.accept()
                except OSError:  # the client gave up before we got to it (or fd exhaustion): go on
                    continue
                client.setblocking(True)
                with self._lock:
                    refuse = self._cut or self._stopping
                    if not refuse:
                        self._spawn(self._connect, client)
                if refuse:
                    client.close()

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        """Start a tracked thread; the caller holds self._lock."""
        thread = threading.Thread(
            target=self._run_tracked, args=(target, *args), name="proxy-conn", daemon=True
        )
        self._threads.add(thread)
        thread.start()

    def _run_tracked(self, target: Callable[..., None], *args: Any) -> None:
        try:
            target(*args)
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _connect(self, client: socket.socket) -> None:
        # Connecting here, not in the acceptor, so a slow or dead target never holds up other clients.
        try:
            upstream = socket.create_connection(self.target, timeout=CONNECT_TIMEOUT_S)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        for sock in (client, upstream):
            # Small request/response messages (the PostgreSQL protocol) must not wait for Nagle.
            with suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair = _Pair(client, upstream)
        with self._lock:
            if self._cut or self._stopping:
                refused = True
            else:
                refused = False
                self._pairs.add(pair)
                self._spawn(self._pump, pair, upstream, client)
        if refused:
            client.close()
            upstream.close()
            return
        self._pump(pair, client, upstream)

    def _pump(self, pair: _Pair, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not pair.closed.is_set():
                try:
                    data = src.recv(CHUNK)
                except OSError:
                    break
                if not data:
                    break
                delay = self._delay_s
                # Waiting on the pair's event, not sleeping: a cut does not wait for the delay to pass.
                if delay > 0 and pair.closed.wait(delay):
                    break
                try:
                    dst.sendall(data)
                except OSError:
                    break
        finally:
            pair.shut()
            if pair.pump_done():
                with self._lock:
                    self._pairs.discard(pair)
