"""What both clients share: where the server is, the API key (given, or read from a file), the request
body's encoding, and the answer's checking (an error status raises the mapped lockstep error)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import msgspec

from ..errors import InvalidInput, LockstepError
from .calls import Call
from .problems import error_of

__all__ = ["Settings", "read_key_file"]

T = TypeVar("T")
_ENCODER = msgspec.json.Encoder()
LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


def read_key_file(path: str | Path) -> str:
    """The API key in file `path` (its first line; surrounding whitespace ignored)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read the API key file {path}: {exc.strerror or exc}") from None
    key = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not key:
        raise InvalidInput(f"the API key file {path} is empty: write the key from `lockstep users create`")
    return key


class Settings:
    """The base URL and the headers every request sends."""

    def __init__(
        self,
        url: str,
        api_key: str | None,
        api_key_file: str | Path | None,
        headers: Mapping[str, str] | None,
        allow_http: bool = False,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidInput(f"{url!r} is not a server URL: write it as https://HOST[:PORT]")
        if parts.scheme == "http" and not allow_http and parts.hostname not in LOOPBACK:
            # The API key is a bearer credential: over plain HTTP anyone on the path can take it.
            raise InvalidInput(
                f"{url} is plain HTTP to a host that is not loopback: the API key would travel in clear "
                f"text; use https://, or allow it explicitly (allow_http=True; the CLI: "
                f"LOCKSTEP_ALLOW_INSECURE_HTTP=1) on a network you trust"
            )
        if api_key is not None and api_key_file is not None:
            raise InvalidInput("give the API key or the API key file, not both")
        key = read_key_file(api_key_file) if api_key_file is not None else api_key
        self.url = url.rstrip("/")
        self.headers = {"Accept": "application/json", "User-Agent": "lockstep-client", **(headers or {})}
        if key:
            self.headers["Authorization"] = f"Bearer {key}"

    def request(self, call: Call[Any]) -> dict[str, Any]:
        """The keyword arguments of httpx's `request` for `call`."""
        kwargs: dict[str, Any] = {"params": call.params or None, "headers": call.headers or None}
        if call.body is not None or call.method == "POST":
            try:
                kwargs["content"] = _ENCODER.encode(call.body)
            except (TypeError, ValueError, OverflowError) as exc:
                raise InvalidInput(f"the request to {call.path} is not JSON: {exc}") from None
            kwargs["headers"] = {**call.headers, "Content-Type": "application/json"}
        return kwargs

    def answer(self, call: Call[T], response: httpx.Response) -> T:
        """The decoded answer, or the lockstep error its problem document stands for."""
        where = f"{call.method} {self.url}{call.path}"
        if response.status_code >= 400:
            raise error_of(response.status_code, response.content, response.headers, where)
        try:
            return call.decode(response.content)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise LockstepError(
                f"{where} answered what this client cannot read ({exc}); is the server a lockstep of a "
                f"matching version?",
                code="bad_response",
            ) from None
