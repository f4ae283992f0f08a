"""`python -m lockstep ARGS` for tests, without paying the interpreter's start-up and lockstep's imports
(about a second) on every call: a fork server that has imported the CLI once forks a fresh process per
command. Each command still runs in its own process, with its own environment, working directory,
stdin, stdout, stderr, exit status and interpreter shutdown (atexit handlers, flushes), exactly as
`python -m lockstep` would; only the import is shared, and it happened in a clean state.

`run` takes `subprocess.run`'s arguments for such a command and returns what it would. Anything the
fork server cannot reproduce goes to a real subprocess: another interpreter, a Python or lockstep
variable that is read while importing (PYTHON*, LOCKSTEP_FAILPOINTS*), or LOCKSTEP_TEST_NO_FORK=1
(run the whole suite the slow, cold way). The server is started on first use, one per test process, and
ends with it.

Shape: the server only accepts and forks (it never starts a thread, so forking it is safe); per command
a manager process forks the command process, sends its pid, waits for it and sends its wait status.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import secrets
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["run"]

_PREFIX = [sys.executable, "-m", "lockstep"]
_IMPORT_TIME_ENV = ("PYTHON", "LOCKSTEP_FAILPOINTS")  # prefixes of variables read while importing
_STATUS = struct.Struct("!qq")  # (pid, 0) first, then (-1, wait status)

_lock = threading.Lock()
_servers: list[tuple[subprocess.Popen[bytes], str]] = []  # this process's server, once started


def _import_time(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_IMPORT_TIME_ENV)}


def _forkable(cmd: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether the server's one import is the one this command would make."""
    if os.environ.get("LOCKSTEP_TEST_NO_FORK") == "1" or list(cmd[:3]) != _PREFIX:
        return False
    return _import_time(env) == _import_time(_server_env())


@functools.cache
def _server_env() -> dict[str, str]:
    """The environment the server imports in: this process's at first use, without lockstep's variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}


def _address() -> str:
    env = _server_env()
    with _lock:
        if _servers and _servers[-1][0].poll() is None:
            return "\0" + _servers[-1][1]
        name = f"lockstep-clifork-{os.getpid()}-{secrets.token_hex(8)}"  # abstract: no file to remove
        proc = subprocess.Popen(  # noqa: S603 - this module, this interpreter
            [sys.executable, "-c", "import lab.clifork as f; f._serve()", name],
            env=env,
            cwd=Path(__file__).resolve().parents[1],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
        )
        if proc.stdout is None or proc.stdout.readline().strip() != b"ready":
            proc.kill()
            raise RuntimeError("the CLI fork server did not start")
        proc.stdout.close()
        atexit.register(_stop, proc)
        _servers.append((proc, name))
        return "\0" + name


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the CLI fork server closed the connection")
        data += chunk
    return data


def _text(data: bytes) -> str:
    """As `text=True` decodes: UTF-8 here (the locale), universal newlines."""
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


def _exit_code(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def run(cmd: Any, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run(cmd, **kwargs)`; forked from the server when that gives the same result: cmd is
    `python -m lockstep ...` with `env`, and the call captures text output without `check`."""
    options = {"capture_output": False, "text": False, "check": False, **kwargs}
    plain = set(options) <= {"capture_output", "text", "check", "env", "cwd", "input", "timeout"} and (
        options["capture_output"] is True and options["text"] is True and options["check"] is False
    )
    env: Mapping[str, str] | None = kwargs.get("env")
    if env is None or not plain or isinstance(cmd, str | bytes) or not _forkable(cmd, env):
        return subprocess.run(cmd, **kwargs)  # noqa: PLW1510, S603 - the caller's own call
    cwd, input_, timeout = kwargs.get("cwd"), kwargs.get("input"), kwargs.get("timeout")
    request = json.dumps({"args": list(cmd[3:]), "env": dict(env), "cwd": os.fspath(cwd or os.getcwd())})
    with (
        tempfile.TemporaryFile() as stdin,
        tempfile.TemporaryFile() as stdout,
        tempfile.TemporaryFile() as stderr,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock,
    ):
        if input_ is not None:
            stdin.write(input_.encode())
            stdin.seek(0)
        sock.connect(_address())
        socket.send_fds(sock, [request.encode()], [stdin.fileno(), stdout.fileno(), stderr.fileno()])
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(timeout)
        pid, _ = _STATUS.unpack(_recv_exact(sock, _STATUS.size))
        try:
            _, status = _STATUS.unpack(_recv_exact(sock, _STATUS.size))
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            stdout.seek(0)
            stderr.seek(0)
            raise subprocess.TimeoutExpired(list(cmd), timeout or 0, stdout.read(), stderr.read()) from None
        stdout.seek(0)
        stderr.seek(0)
        out, err = _text(stdout.read()), _text(stderr.read())
    return subprocess.CompletedProcess(list(cmd), _exit_code(status), out, err)


# The server side -------------------------------------------------------------------------------------


def _serve() -> None:
    name = "\0" + sys.argv[1]
    # The imports every command shares: the CLI, and the engine and stores that most commands open.
    import lockstep.cli  # noqa: PLC0415
    import lockstep.engine  # noqa: PLC0415
    import lockstep.store.postgres  # noqa: PLC0415
    import lockstep.store.sqlite  # noqa: F401, PLC0415

    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(name)
    listener.listen(64)
    listener.settimeout(1.0)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # managers are reaped by the kernel
    print("ready", flush=True)
    while os.getppid() == parent:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        if os.fork() == 0:
            listener.close()
            _manage(conn)  # a manager never returns; its command returns by raising SystemExit
        conn.close()


def _manage(conn: socket.socket) -> None:
    """In a manager process: fork the command, report its pid, wait for it, report its status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the command's own children and its wait status
    try:
        conn.setblocking(True)
        msg, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
        while chunk := conn.recv(1 << 20):  # a request larger than one read
            msg += chunk
        request = json.loads(msg)
        pid = os.fork()
    except BaseException:
        os._exit(1)
    if pid == 0:
        conn.close()
        _command(request, fds)  # ends in SystemExit, which unwinds to the interpreter's own exit
    try:
        for fd in fds:
            os.close(fd)
        conn.sendall(_STATUS.pack(pid, 0))
        _, status = os.waitpid(pid, 0)
        with contextlib.suppress(OSError):  # the client gave up (a timeout): nobody to tell
            conn.sendall(_STATUS.pack(-1, status))
    finally:
        os._exit(0)


def _command(request: dict[str, Any], fds: list[int]) -> None:
    """In the command process: become `python -m lockstep ARGS` and exit as it would."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = os.getcwd()  # `python -m` puts the working directory first
    sys.argv = ["lockstep", *request["args"]]
    # sys.stdin/stdout/stderr stay: they were made for fds 0-2 (now this command's) with nothing buffered,
    # and lockstep's consoles look them up on every write.
    import runpy  # noqa: PLC0415

    runpy.run_module("lockstep", run_name="__main__", alter_sys=True)
    raise SystemExit(0)
