"""A hostile gateway (or identity provider) answers terminal escapes and
bidi overrides: the client's errors show them escaped, the same text s2uc
prints for the same answer; it answers an error code that is no code: the
client refuses the answer."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

import scistream
from scistream.auth import LoginError, LoginStore
from scistream.errors import printable

from conftest import Pair
from test_trust import FakeGateway, certs, fake, make_cert  # noqa: F401 (certs, fake: fixtures)

# ---- terminal escapes and codes ---------------------------------------------

HOSTILE = ("\x1b]0;pwned\x07" "\x1b[31mred\x1b[0m " "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\ "
           "\u202eexe.txt\u202c \u009b2J\x7f tab\there")
# What s2uc's printable makes of it (cmd/s2uc/printable.go).
ESCAPED = (r"\x1b]0;pwned\a" r"\x1b[31mred\x1b[0m " r"\x1b]8;;https://evil.example/\x1b\click\x1b]8;;\x1b\ "
           r"\u202eexe.txt\u202c \u009b2J\x7f tab\there")


def raw_controls(s: str) -> list[str]:
    return [c for c in s if not c.isprintable() and c != "\n"]


def test_printable_is_s2ucs() -> None:
    assert printable(HOSTILE) == ESCAPED
    for s in ("plain", "é😀 ok", ""):
        assert printable(s) == s
    assert printable("\U000e0041\u2028\ufeff\x00") == r"\U000e0041\u2028\ufeff\x00"
    assert printable("\ud800") == "\ufffd"  # as Go's JSON decoder makes a lone surrogate


def test_gateway_text_escaped_in_errors(fake: Any, certs: Any, pair: Pair, tmp_path: Path) -> None:
    """A gateway's refusal carries OSC (title, hyperlink), SGR and U+202E
    in its message and a C1 CSI in its request id: str() of the error
    (what a notebook or a traceback prints) shows each escaped, the same
    text s2uc prints for the same answer."""
    def answer(method: str, path: str, body: Any) -> tuple[int, Any]:
        return 400, {"error": {"code": "invalid_argument", "message": HOSTILE}}
    g = fake(answer)
    with scistream.Client(g.addr, server_cert=str(certs["fake"][0]), token="t") as c:
        with pytest.raises(scistream.InvalidArgument) as ei:
            c.info()
    e = ei.value
    assert raw_controls(str(e)) == [] and raw_controls(e.message) == []
    assert str(e).startswith(f"invalid_argument: {ESCAPED} (request ")
    assert e.message == ESCAPED
    # s2uc, the same answer, the same text.
    tok = tmp_path / "tok"
    tok.write_text("t")
    tok.chmod(0o600)
    out = subprocess.run([str(pair.bins / "s2uc"), "info", "--s2cs", g.addr, "--server_cert", str(certs["fake"][0]),
                          "--token_file", str(tok)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and ESCAPED in out.stderr, out.stderr


def test_request_id_escaped(certs: Any) -> None:
    """The request id an error carries (X-Request-Id) is the gateway's
    text too: a C1 CSI (byte 0x9b, which a header may hold) is escaped.
    (A status line's reason cannot carry one: httpx keeps its ASCII.)"""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*certs["fake"])
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(30)
    addr = f"127.0.0.1:{srv.getsockname()[1]}"
    body = json.dumps({"error": {"code": "permission_denied", "message": "no"}}).encode()
    answer = b"HTTP/1.1 403 Forbidden\r\nX-Request-Id: id\x9b2J\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"

    def serve() -> None:
        try:
            raw, _ = srv.accept()
        except OSError:
            return
        with ctx.wrap_socket(raw, server_side=True) as c:
            head = b""
            while b"\r\n\r\n" not in head:
                b = c.recv(4096)
                if not b:
                    break
                head += b
            c.sendall(answer % (len(body), body))
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        with scistream.Client(addr, server_cert=str(certs["fake"][0]), token="t") as c:
            with pytest.raises(scistream.PermissionDenied) as ei:
                c.info()
        assert ei.value.request_id == r"id\u009b2J" and raw_controls(str(ei.value)) == [], str(ei.value)
    finally:
        srv.close()
        t.join(30)


@pytest.mark.parametrize("code", ["Invalid_Argument", "not-found", "x\x1b[2J", "conflict ", "a1", "\u202econflict"])
def test_malformed_code_refused(code: str, fake: Any, certs: Any) -> None:
    """An error code that is no code of the API (lower-case letters and _)
    is a malformed answer, said with the gateway's address; it is not
    raised as an APIError carrying it."""
    g = fake(lambda m, p, b: (409, {"error": {"code": code, "message": "m"}}))
    with scistream.Client(g.addr, server_cert=str(certs["fake"][0]), token="t") as c:
        with pytest.raises(scistream.BadAnswer) as ei:
            c.info()
    assert not isinstance(ei.value, scistream.APIError)
    assert str(ei.value).startswith(f"s2cs {g.addr}: answer refused: HTTP 409 with error code ")
    assert "is no code of the API (lower-case letters and _)" in str(ei.value)
    assert raw_controls(str(ei.value)) == []


def test_identity_provider_error_escaped(tmp_path: Path, isolated_env: Path) -> None:
    crt, key = make_cert(tmp_path, "idp")
    srv = FakeGateway(crt, key, lambda m, p, b: (400, {"error": HOSTILE}))
    try:
        isolated_env.mkdir(mode=0o700, parents=True, exist_ok=True)
        p = isolated_env / "login.json"
        p.write_text(json.dumps({"issuer": "https://idp.example", "client_id": "s2uc", "ca_file": str(crt),
                                 "token_endpoint": f"https://{srv.addr}/token", "access_token": "old", "refresh_token": "r1",
                                 "expiry": "2000-01-01T00:00:00Z"}))
        p.chmod(0o600)
        with pytest.raises(LoginError) as ei:
            LoginStore(p).token()
        assert raw_controls(str(ei.value)) == [] and r"\x1b]0;pwned" in str(ei.value)
    finally:
        srv.close()
