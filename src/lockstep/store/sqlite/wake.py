"""Wake-ups between lockstep processes on one SQLite database, PostgreSQL's NOTIFY for the one machine a
SQLite file lives on: only a hint, so a waiting worker or scheduler starts its next pass at once instead
of at its next poll. Correctness never depends on it: every listener keeps polling, and a wake-up that
is lost, late, doubled or forged costs at most one poll interval or one extra pass.

Each listening process binds a Unix datagram socket in the abstract namespace (no file to leave behind
when it is SIGKILLed; no path-length limit from a deep database path) and drops a marker file naming it
and its channels in `<database>.wake/` (mode 0700). After a transaction that queued work commits, its
process sends one byte to every marker's socket on the channels it touched, non-blocking; a marker
whose socket is gone (the process died) is removed by the first sender that finds it so.

An abstract socket has no file permissions, so the listener asks the kernel for each datagram's sender
(SO_PASSCRED) and ignores any not sent by its own user or root: another local user cannot make a worker
spin on forged wake-ups.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import struct
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

__all__ = ["WakeDir", "sender_trusted"]

PREFIX = "lockstep-wake-"
_UCRED = struct.Struct("iII")  # struct ucred: pid, uid, gid


def sender_trusted(ancillary: list[tuple[int, int, bytes]], uid: int) -> bool:
    """Whether a datagram's SCM_CREDENTIALS say it came from user `uid` or root (none: refused)."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= _UCRED.size:
            _pid, sender, _gid = _UCRED.unpack(data[: _UCRED.size])
            return sender in (uid, 0)
    return False


class WakeDir:
    """The wake-up directory of one SQLite database file."""

    def __init__(self, database: str) -> None:
        self.dir = Path(f"{database}.wake")
        self._out: socket.socket | None = None
        self._lock = threading.Lock()

    def listen(self, channels: Sequence[str], on_notify: Callable[[], None], stop: threading.Event) -> None:
        """Call on_notify for every wake-up on `channels` until stop is set (run it in a thread). Never
        raises: without a directory or a socket it returns, and the caller polls as before."""
        token = secrets.token_hex(8)
        marker = self.dir / f"{token}.{'+'.join(sorted(channels))}"
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        except OSError:
            return
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            sock.bind(f"\0{PREFIX}{token}")
            sock.settimeout(0.5)  # how soon a stop is seen; wake-ups arrive at once
            self.dir.mkdir(mode=0o700, exist_ok=True)
            marker.touch(mode=0o600)
        except OSError:
            sock.close()
            return
        uid = os.getuid()
        try:
            while not stop.is_set():
                try:
                    _data, ancillary, _flags, _addr = sock.recvmsg(64, socket.CMSG_SPACE(_UCRED.size))
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not stop.is_set() and sender_trusted(ancillary, uid):
                    on_notify()
        finally:
            sock.close()
            with contextlib.suppress(OSError):
                marker.unlink()

    def notify(self, channels: Iterable[str]) -> None:
        """Wake every process listening on any of `channels` (after the commit that queued the work)."""
        wanted = set(channels)
        if not wanted:
            return
        try:
            entries = list(os.scandir(self.dir))
        except OSError:
            return  # nobody listens (yet): they poll
        with self._lock:
            if self._out is None:
                self._out = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._out.setblocking(False)
            for entry in entries:
                token, _, names = entry.name.partition(".")
                if not wanted & set(names.split("+")):
                    continue
                try:
                    self._out.sendto(b"!", f"\0{PREFIX}{token}")
                except BlockingIOError:
                    continue  # its queue is full: a wake-up is pending already
                except (ConnectionRefusedError, FileNotFoundError):
                    with contextlib.suppress(OSError):
                        Path(entry.path).unlink()  # its process is gone
                except OSError:
                    continue

    def close(self) -> None:
        with self._lock:
            if self._out is not None:
                self._out.close()
                self._out = None
