"""A real `lockstep serve` on loopback for the client and protocol tests (a subprocess, a free port)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

__all__ = ["serving"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(db_url: str, workdir: Path) -> Iterator[str]:
    """`lockstep --db URL serve` until the block ends (SIGTERM, then SIGKILL after 15 s); its base URL."""
    port = _free_port()
    log_path = workdir / "serve.log"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lockstep", "--db", db_url, "serve", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env=clean,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "lockstep serve did not answer /healthz within 30 s"
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
