"""The attacker's cases: a gateway whose certificate is not the pinned one is
refused before the token leaves the client, and a gateway that answers what
no SciStream gateway would (a malformed listener, a transport downgrade, a
bad secret...) is refused as s2uc refuses it, its stream released again and
nothing relayed to the other gateway."""

from __future__ import annotations

import base64
import datetime as dt
import http.server
import json
import os
import socket
import ssl
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

import scistream

from conftest import Echo, Pair


def make_cert(dir: Path, name: str) -> tuple[Path, Path]:
    crt, key = dir / f"{name}.crt", dir / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(crt), "-days", "1", "-subj", f"/CN={name}",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return crt, key


class FakeGateway:
    """An HTTPS server on loopback that answers the control API as told
    (answer(method, path, body) -> (status, json)) and records each request
    it got, with its headers."""

    def __init__(self, crt: Path, key: Path, answer: Any) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.raw_bytes = 0
        fake = self

        class H(http.server.BaseHTTPRequestHandler):
            def _do(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")  # a form, for the token endpoint
                fake.requests.append((self.command, self.path, dict(self.headers)))
                status, out = answer(self.command, self.path, body)
                data = json.dumps(out).encode()
                self.send_response(status)
                if self.headers.get("X-Request-Id"):  # kept, as a gateway keeps it
                    self.send_header("X-Request-Id", self.headers["X-Request-Id"])
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PATCH = _do

            def log_message(self, *a: Any) -> None:
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        self.srv.socket = ctx.wrap_socket(self.srv.socket, server_side=True)
        self.addr = f"127.0.0.1:{self.srv.server_address[1]}"
        self.t = threading.Thread(target=self.srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.t.start()

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()
        self.t.join(5)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("certs")
    return {n: make_cert(d, n) for n in ("fake", "other")}


def stream_answer(pem: str, **override: Any) -> dict[str, Any]:
    now = dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")
    s = {"uid": str(uuid.uuid4()), "role": "inbound", "state": "listening", "owner": "alice",
         "listeners": ["127.0.0.1:20000"], "targets": ["127.0.0.1:9"], "num_conn": 1, "wan": "tls", "engine": "splice",
         "created": now, "updated": now, "wan_cert": pem, "secret": base64.b64encode(os.urandom(32)).decode()}
    s.update(override)
    return s


@pytest.fixture
def fake(certs: dict[str, tuple[Path, Path]]) -> Iterator[Any]:
    made: list[FakeGateway] = []

    def start(answer: Any, cert: str = "fake") -> FakeGateway:
        g = FakeGateway(*certs[cert], answer)
        made.append(g)
        return g
    yield start
    for g in made:
        g.close()


# ---- the certificate ---------------------------------------------------------


def test_wrong_pinned_certificate_refused_before_the_token(pair: Pair, fake: Any, certs: Any) -> None:
    """A fake gateway on the gateway's address would get nothing: the
    client pinned the real gateway's certificate, so the handshake's check
    fails before any HTTP byte, and the token, is sent."""
    g = fake(lambda *a: (200, {}))
    for pin in (pair.cons.cert, f"sha256:{pair.cons.fingerprint}"):
        with scistream.Client(g.addr, server_cert=pin, token=pair.tokens["alice"]) as c:
            with pytest.raises(scistream.CertificateError, match="does not match"):
                c.info()
    assert g.requests == []


def test_real_gateway_with_another_pin_refused(pair: Pair) -> None:
    with scistream.Client(pair.cons.addr, server_cert=pair.prod.cert, token=pair.tokens["alice"]) as c:
        with pytest.raises(scistream.CertificateError):
            c.info()
    with scistream.Client(pair.cons.addr, server_cert="sha256:" + "0" * 64, token=pair.tokens["alice"]) as c:
        with pytest.raises(scistream.CertificateError):
            c.info()
    # Without a pin, the system's roots do not vouch for a self-signed gateway.
    with scistream.Client(pair.cons.addr, token=pair.tokens["alice"]) as c:
        with pytest.raises(scistream.CertificateError, match="system's trusted roots"):
            c.info()


def test_fingerprint_pin(pair: Pair) -> None:
    with scistream.Client(pair.cons.addr, server_cert=f"sha256:{pair.cons.fingerprint.upper()}", token=pair.tokens["alice"]) as c:
        assert c.info().wan_cert_sha256 == pair.cons.fingerprint


def test_unreachable_and_plain_http() -> None:
    s = socket.create_server(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with scistream.Client(f"127.0.0.1:{port}", token="t") as c:
        with pytest.raises(scistream.Unreachable):
            c.info()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        with scistream.Client(f"127.0.0.1:{srv.server_address[1]}", server_cert="sha256:" + "0" * 64, token="t") as c:
            with pytest.raises(scistream.NotHTTPS):
                c.info()
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


# ---- answers no gateway would give -----------------------------------------

BAD = {
    "listener with a path": {"listeners": ["127.0.0.1:20000/x"]},
    "listener port 0": {"listeners": ["127.0.0.1:0"]},
    "listener port out of range": {"listeners": ["127.0.0.1:65536"]},
    "listener port with a sign": {"listeners": ["127.0.0.1:+80"]},
    "listener host with a space": {"listeners": ["evil host:80"]},
    "listener without port": {"listeners": ["127.0.0.1"]},
    "no listener": {"listeners": []},
    "wan downgraded to tcp": {"wan": "tcp"},
    "secret of 16 bytes": {"secret": base64.b64encode(os.urandom(16)).decode()},
    "wan_cert not a certificate": {"wan_cert": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"},
    "wan_cert of two certificates": "twice",
    "server name not a name": {"wan_server_name": "a/b"},
    "node not a host": {"nodes": ["127.0.0.1:80"]},
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_inbound_answer_refused(case: str, pair: Pair, fake: Any, certs: Any, echo: Echo) -> None:
    pem = certs["fake"][0].read_text()
    override = BAD[case] if BAD[case] != "twice" else {"wan_cert": pem + pem}
    answer = stream_answer(pem, **override)

    def answer_fn(method: str, path: str, body: Any) -> tuple[int, Any]:
        if method == "DELETE":
            return 200, {**answer, "state": "released"}
        return 201, answer

    g = fake(answer_fn)
    before = {s.uid for s in pair.client(pair.prod).list(all=True)}
    with pytest.raises(scistream.BadAnswer, match="answer refused"):
        with scistream.stream(inbound=g.addr, outbound=pair.prod.addr, inbound_server_cert=str(certs["fake"][0]),
                              outbound_server_cert=pair.prod.cert, token_file=pair.token_file("alice"),
                              target=("127.0.0.1", echo.port)):
            pytest.fail("wired")
    # The stream the answer named was released again on the fake, and the
    # real outbound gateway was never asked.
    assert [(m, p) for m, p, _ in g.requests] == [("POST", "/v1/streams/inbound"), ("DELETE", f"/v1/streams/{answer['uid']}")]
    assert {s.uid for s in pair.client(pair.prod).list(all=True)} == before


def test_uid_not_a_uid_names_no_url(fake: Any, certs: Any) -> None:
    pem = certs["fake"][0].read_text()
    g = fake(lambda m, p, b: (201, stream_answer(pem, uid="../../v1/info")))
    with scistream.Client(g.addr, server_cert=str(certs["fake"][0]), token="t") as c:
        with pytest.raises(scistream.BadAnswer, match="not a stream UID"):
            c.inbound(remote_ip="127.0.0.1", receiver_ports=[9], num_conn=1)
    assert [m for m, _, _ in g.requests] == ["POST"]


def test_answer_about_another_stream(fake: Any, certs: Any) -> None:
    pem = certs["fake"][0].read_text()
    g = fake(lambda m, p, b: (200, stream_answer(pem)))
    with scistream.Client(g.addr, server_cert=str(certs["fake"][0]), token="t") as c:
        with pytest.raises(scistream.BadAnswer, match="answered about"):
            c.get(str(uuid.uuid4()))


def test_redirect_not_followed(fake: Any, certs: Any) -> None:
    g = fake(lambda m, p, b: (307, {"error": {}}))
    with scistream.Client(g.addr, server_cert=str(certs["fake"][0]), token="t") as c:
        with pytest.raises(scistream.SciStreamError, match="HTTP 307"):
            c.info()
    assert len(g.requests) == 1
