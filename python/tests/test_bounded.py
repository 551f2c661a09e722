"""A hostile gateway (or identity provider) the client pinned answers 300
MB, with its Content-Length, chunked or until it closes: the client reads
no further than its limit (16 MiB, 1 MiB of an identity provider), its
memory stays near it, and the error says what the gateway did."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import ssl
import threading
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest

import scistream
from scistream.auth import LoginError, LoginStore
from scistream.client import MAX_ANSWER

from test_trust import make_cert

FLOOD = 300 << 20
SNDBUF = 256 << 10


def _proc_kib(field: str) -> int:
    m = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    assert m, field
    return int(m.group(1))


def kernel_buffers() -> int:
    """The most the kernels hold of a loopback connection between the
    server's send and the client's read: the client's receive buffer at
    its largest (autotuning) and the server's send buffer (SNDBUF, which
    the kernel doubles)."""
    rmem_max = int(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()[2])
    return rmem_max + 2 * SNDBUF


class Flood:
    """The attacker's HTTPS server on loopback: it answers the first
    request on each connection with status and a body of size bytes, with
    its Content-Length (framing "length"), chunked ("chunked") or until it
    closes ("close"), and counts the bytes of body its kernel took (sent):
    what the client could have read at most, with the kernels' buffers."""

    def __init__(self, crt: Path, key: Path, framing: str, size: int = FLOOD, status: int = 200) -> None:
        self.framing, self.size, self.status = framing, size, status
        self.sent = 0
        self.requests: list[bytes] = []
        self.errors: list[BaseException] = []
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(crt, key)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(60)
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    def _serve(self) -> None:
        try:
            raw, _ = self.sock.accept()
        except OSError as e:
            self.errors.append(e)
            return
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
        raw.settimeout(60)  # a client that neither reads nor closes ends the test, not the suite
        try:
            with self.ctx.wrap_socket(raw, server_side=True) as c:
                head = b""
                while b"\r\n\r\n" not in head:
                    b = c.recv(4096)
                    if not b:
                        return
                    head += b
                self.requests.append(head)
                hdr = f"HTTP/1.1 {self.status} X\r\nContent-Type: application/json\r\n"
                if self.framing == "length":
                    hdr += f"Content-Length: {self.size}\r\n"
                elif self.framing == "chunked":
                    hdr += "Transfer-Encoding: chunked\r\n"
                else:
                    hdr += "Connection: close\r\n"
                c.sendall((hdr + "\r\n").encode())
                block = b"[" + b"1," * ((1 << 20) // 2 - 1) + b"1"
                while self.sent < self.size:
                    data = block
                    if self.framing == "chunked":
                        data = f"{len(block):x}\r\n".encode() + block + b"\r\n"
                    view = memoryview(data)
                    while view:
                        # A TLS record at a time: sent is then exact to 16 KiB.
                        n = c.send(view[:16 << 10])
                        view = view[n:]
                        self.sent += n
                if self.framing == "chunked":
                    c.sendall(b"0\r\n\r\n")
        except (OSError, ssl.SSLError) as e:  # the client hung up: what we want
            self.errors.append(e)

    def wait(self) -> None:
        self.t.join(90)
        assert not self.t.is_alive(), "the flood's server did not end: the client neither read nor closed"

    def close(self) -> None:
        self.sock.close()
        self.t.join(90)


@pytest.fixture(scope="module")
def hostile_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_cert(tmp_path_factory.mktemp("hostile"), "hostile")


@pytest.fixture
def flood(hostile_cert: tuple[Path, Path]) -> Iterator[Callable[..., Flood]]:
    made: list[Flood] = []

    def start(framing: str, **kw: Any) -> Flood:
        f = Flood(*hostile_cert, framing, **kw)
        made.append(f)
        return f
    yield start
    for f in made:
        f.close()


def peak_growth_kib(fn: Callable[[], Any]) -> tuple[int, Optional[BaseException]]:
    """How much the process's peak RSS grew over its RSS while fn ran (the
    peak reset first: clear_refs 5), and what fn raised."""
    Path("/proc/self/clear_refs").write_text("5")
    before = _proc_kib("VmRSS")
    err: Optional[BaseException] = None
    try:
        fn()
    except BaseException as e:  # noqa: BLE001
        err = e
    return _proc_kib("VmHWM") - before, err


# ---- 300 MB answers ----------------------------------------------------------


@pytest.mark.parametrize("framing", ["length", "chunked", "close"])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_huge_answer_read_no_further_than_the_limit(framing: str, kind: str, flood: Callable[..., Flood],
                                                     hostile_cert: tuple[Path, Path]) -> None:
    """A pinned gateway answers 300 MB. With a Content-Length the answer
    is refused by its head, before the body is read; chunked or
    close-delimited it is refused once 16 MiB are read. The client reads
    no further: the server's kernel took no more than the limit and the
    kernels' buffers, and the process's memory stayed near the limit."""
    f = flood(framing)
    pin = str(hostile_cert[0])

    def call() -> None:
        if kind == "sync":
            with scistream.Client(f.addr, server_cert=pin, token="t", timeout=60) as c:
                c.info()
        else:
            async def run() -> None:
                async with scistream.AsyncClient(f.addr, server_cert=pin, token="t", timeout=60) as c:
                    await c.info()
            asyncio.run(run())

    grew, err = peak_growth_kib(call)
    f.wait()
    assert len(f.requests) == 1
    if framing == "length":
        # Refused by its head: what the server could send is what the
        # kernels held before the client hung up, far less than the limit.
        assert f.sent < 8 << 20, f.sent
    else:
        assert f.sent <= MAX_ANSWER + kernel_buffers() + (1 << 20), f.sent
    assert grew < 64 << 10, f"peak RSS grew by {grew} KiB"
    assert isinstance(err, scistream.BadAnswer), repr(err)
    if framing == "length":
        assert str(err) == f"s2cs {f.addr}: answer refused: an answer of {FLOOD} bytes (its Content-Length), more than the {MAX_ANSWER} the client reads"
    else:
        assert str(err) == f"s2cs {f.addr}: answer refused: an answer of more than {MAX_ANSWER} bytes, which the client reads at most"


def test_huge_error_answer_and_health_bounded(flood: Callable[..., Flood], hostile_cert: tuple[Path, Path]) -> None:
    """An error answer and /healthz are read through the same bound."""
    f = flood("chunked", status=500)
    with scistream.Client(f.addr, server_cert=str(hostile_cert[0]), token="t", timeout=60) as c:
        with pytest.raises(scistream.BadAnswer, match=f"more than {MAX_ANSWER} bytes"):
            c.release(str(uuid.uuid4()))
    f.wait()
    assert f.sent <= MAX_ANSWER + kernel_buffers() + (1 << 20), f.sent
    g = flood("close")
    with scistream.Client(g.addr, server_cert=str(hostile_cert[0]), token="t", timeout=60) as c:
        with pytest.raises(scistream.BadAnswer, match=f"more than {MAX_ANSWER} bytes"):
            c.health()
    g.wait()
    assert g.sent <= MAX_ANSWER + kernel_buffers() + (1 << 20), g.sent


@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_huge_identity_provider_answer_bounded(framing: str, flood: Callable[..., Flood], hostile_cert: tuple[Path, Path],
                                              isolated_env: Path) -> None:
    """The identity provider's token endpoint, renewing the login, answers
    300 MB: the renewal fails at 1 MiB (as internal/idp reads), the client
    reads no further."""
    f = flood(framing)
    isolated_env.mkdir(mode=0o700, parents=True, exist_ok=True)
    p = isolated_env / "login.json"
    p.write_text(json.dumps({"issuer": "https://idp.example", "client_id": "s2uc", "ca_file": str(hostile_cert[0]),
                             "token_endpoint": f"https://{f.addr}/token", "access_token": "old", "refresh_token": "r1",
                             "expiry": "2000-01-01T00:00:00Z"}))
    p.chmod(0o600)
    grew, err = peak_growth_kib(lambda: LoginStore(p).token())
    f.wait()
    if framing == "length":
        assert f.sent < 8 << 20, f.sent
    else:
        assert f.sent <= (1 << 20) + kernel_buffers() + (1 << 20), f.sent
    assert grew < 32 << 10, f"peak RSS grew by {grew} KiB"
    assert isinstance(err, LoginError), repr(err)
    want = f"an answer of {FLOOD} bytes, more than 1 MiB" if framing == "length" else "an answer larger than 1 MiB"
    assert str(err) == f"your login to https://idp.example could not be renewed ({want}): run s2uc login"
    assert json.loads(p.read_text())["access_token"] == "old"
