"""The http step's pure parts: the step's parser (every problem named where it is), the egress policy's
URL and address checks, and TLS through the pinned connection (the certificate is checked against the
URL's host name while the socket goes to the checked address)."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from lockstep.core.definition import DefinitionError, HttpStep, parse_definition
from lockstep.core.egress import PolicyError, parse_policy, refusal, url_refusal
from lockstep.runtime.activity import ActivityContext, ActivityError
from lockstep.runtime.egress import EgressGuard
from lockstep.runtime.httpstep import HttpExecutor


def _problems(http: Any, **step: Any) -> list[tuple[str, str]]:
    with pytest.raises(DefinitionError) as info:
        parse_definition({"name": "t", "steps": [{"id": "call", "http": http, **step}]})
    return info.value.problems


def test_an_http_step_is_an_activity_step_of_the_builtin_activity() -> None:
    """It compiles to lockstep.http with the request as its input template and its retry policy."""
    d = parse_definition(
        {
            "name": "t",
            "steps": [
                {
                    "id": "call",
                    "http": {"url": "https://a.example/${input.id}", "retry": {"max_attempts": 7}},
                }
            ],
        }
    )
    step = d.step("call")
    assert isinstance(step, HttpStep)
    assert step.activity == "lockstep.http"
    assert step.retry.max_attempts == 7
    rendered = step.input.render({"input": {"id": "x"}, "steps": {}, "run": {}})
    assert rendered["url"] == "https://a.example/x"
    assert rendered["success"] == "response.status < 300"
    assert rendered["idempotency_header"] == "Idempotency-Key"


def test_every_problem_of_an_http_step_is_named_with_its_fix() -> None:
    """A bad method, scheme, header, secret, success expression and bound are each reported."""
    found = dict(
        _problems(
            {
                "method": "TRACE",
                "url": "ftp://x",
                "headers": {"Host": "evil", "X-Ok": 3},
                "auth": {"secret": "${input.key}", "scheme": "basic"},
                "success": "input.ok",
                "max_response_bytes": 10**9,
                "max_redirects": 50,
            }
        )
    )
    p = "steps[0](call).http"
    assert "GET, POST" in found[f"{p}.method"]
    assert "https://" in found[f"{p}.url"]
    assert "set by the HTTP client" in found[f"{p}.headers.Host"]
    assert "string" in found[f"{p}.headers.X-Ok"]
    assert "never a value or a template" in found[f"{p}.auth.secret"]
    assert "bearer" in found[f"{p}.auth.scheme"]
    assert "may use only response" in found[f"{p}.success"]
    assert "max_output_bytes" in found[f"{p}.max_response_bytes"]
    assert "10" in found[f"{p}.max_redirects"]


def test_an_activity_step_cannot_name_a_builtin_activity() -> None:
    """`activity: lockstep.http` would bypass the http step's checks: refused."""
    with pytest.raises(DefinitionError, match="reserved for built-in steps"):
        parse_definition({"name": "t", "steps": [{"id": "a", "activity": "lockstep.http", "timeout": "1s"}]})


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"allow": ["ftp://x/"]}, "https://"),
        ({"allow": ["https://u:p@x/"]}, "credentials"),
        ({"allow": ["https://x/?q=1"]}, "no query"),
        ({"allow_hosts": ["https://x"]}, "not a host name"),
        ({"allow_http": "yes"}, "true or false"),
        ({"deny": []}, "unknown egress policy field"),
    ],
)
def test_a_bad_policy_entry_is_refused_with_its_fix(policy: dict[str, Any], message: str) -> None:
    """Each bad entry is named; nothing half-parsed is stored."""
    with pytest.raises(PolicyError, match=message):
        parse_policy(policy)


def test_prefixes_end_at_a_segment_and_hosts_match_exactly_or_as_subdomains() -> None:
    """/v1 admits /v1/x but not /v10; api.example.com does not admit api.example.com.evil."""
    p = parse_policy({"allow": ["https://api.example.com/v1"], "allow_hosts": ["*.example.org"]})
    assert url_refusal(p, "https://api.example.com/v1/charges") is None
    assert url_refusal(p, "https://API.example.com:443/v1") is None
    assert url_refusal(p, "https://api.example.com/v10") is not None
    assert url_refusal(p, "https://api.example.com.evil/v1") is not None
    assert url_refusal(p, "https://api.example.com:8443/v1") is not None
    assert url_refusal(p, "https://a.example.org/") is None
    assert url_refusal(p, "https://example.org/") is not None
    assert url_refusal(p, "https://evilexample.org/") is not None


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "::1",
        "10.0.0.1",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "fd00:ec2::254",
        "fe80::1",
        "100.64.0.1",
        "0.0.0.0",  # noqa: S104 - an address to refuse, not one to bind
        "::",
        "224.0.0.1",
        "::ffff:10.0.0.1",
        "64:ff9b::a00:1",
        "2002:a00:1::1",
        "fc00::1",
    ],
)
def test_internal_addresses_are_refused_whatever_the_policy(address: str) -> None:
    """Every non-public address is refused; only loopback, with the policy flag and the server's switch."""
    p = parse_policy({"allow_hosts": ["x.example"], "allow_loopback": True})
    ip = ipaddress.ip_address(address)
    assert refusal(ip, p, loopback_ok=False) is not None
    if address not in ("127.0.0.1", "::1"):
        assert refusal(ip, p, loopback_ok=True) is not None


def test_public_addresses_pass() -> None:
    """8.8.8.8 and 2606:4700::1 are public."""
    p = parse_policy({"allow_hosts": ["x.example"]})
    assert refusal(ipaddress.ip_address("8.8.8.8"), p, False) is None
    assert refusal(ipaddress.ip_address("2606:4700::1"), p, False) is None


# --- TLS through the pinned connection -------------------------------------------------------------


def _cert(tmp: Path, name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / f"{name}.pem", tmp / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


class _Ports:
    def __init__(self, allow: str) -> None:
        self.policy = parse_policy({"allow": [allow], "allow_loopback": True})
        self.refused: list[str] = []

    def egress_policy(self, tenant: str) -> Any:
        return self.policy

    def egress_refused(self, tenant: str, run_id: str, step: str, url: str, reason: str) -> None:
        self.refused.append(reason)

    def open_secret(self, *args: Any) -> tuple[int, str]:
        raise AssertionError("no secret in this test")


def _tls_server(cert: Path, key: Path) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: Any) -> None:
            pass

        def do_GET(self) -> None:
            body = b'{"tls": true}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_tls_is_verified_against_the_urls_host_while_the_socket_goes_to_the_checked_address(
    tmp_path: Path,
) -> None:
    """api.test (resolved by the seam to 127.0.0.1) with a certificate for api.test: the request
    succeeds; the same server behind other.test (its certificate does not name it) is refused."""
    cert, key = _cert(tmp_path, "api.test")
    server = _tls_server(cert, key)
    try:
        port = server.server_address[1]
        trust = ssl.create_default_context(cafile=str(cert))
        guard = EgressGuard(lambda _h, _p: [ipaddress.ip_address("127.0.0.1")], loopback_ok=True)
        ctx = ActivityContext("acme", "r1", "call", 1, "acme:r1:call", "lockstep.http", "t", 1)
        ok = HttpExecutor(_Ports(f"https://api.test:{port}/"), guard, trust)
        out = ok({"method": "GET", "url": f"https://api.test:{port}/x", "headers": {}}, ctx)
        assert isinstance(out, dict)
        assert out["body"] == {"tls": True}
        wrong = HttpExecutor(_Ports(f"https://other.test:{port}/"), guard, trust)
        with pytest.raises(ActivityError) as info:
            wrong({"method": "GET", "url": f"https://other.test:{port}/x", "headers": {}}, ctx)
        assert info.value.code == "HttpConnectionError"
        assert "certificate" in info.value.message.lower() or "hostname" in info.value.message.lower()
    finally:
        server.shutdown()
        server.server_close()
