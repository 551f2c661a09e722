"""Real gateways for the tests, as the Go e2e tests start them: the binaries
built once per session (go build ./cmd/s2cs ./cmd/s2uc), two s2cs on random loopback
addresses with a token file, a roles file and --allow_targets/--allow_peers
127.0.0.0/8, each waited on until /healthz answers (never a sleep)."""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import os
import queue
import random
import secrets
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest

import scistream

REPO = Path(__file__).resolve().parents[2]
IDENTITIES = ["alice", "bob", "reader", "oper"] + [f"user{i:02d}" for i in range(20)]


def wait_for(cond: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    """Polls cond until it returns a true value, within timeout (internal/waitfor)."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def random_loopback() -> str:
    v = random.randrange(250 * 250 * 250)
    return f"127.{1 + v // (250 * 250)}.{1 + v // 250 % 250}.{1 + v % 250}"


_LIBC = ctypes.CDLL("libc.so.6", use_errno=True)  # loaded here: the child after fork only calls it


def _pdeathsig() -> None:
    # The gateway dies with the test process (SIGTERM), as localgw's do.
    _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclasses.dataclass
class Gateway:
    addr: str
    cert: str
    fingerprint: str
    ip: str
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_gateway(s2cs: str, dir: Path, tokens: Path, args: list[str] = (), ip: Optional[str] = None) -> Gateway:  # type: ignore[assignment]
    ip = ip or random_loopback()
    dir.mkdir(parents=True, exist_ok=True)
    log = dir / "s2cs.log"
    cmd = [s2cs, "--listener_ip", ip, "--port", "0", "--port_range", "20000-20299", "--state_dir", str(dir / "state"),
           "--tokens", str(tokens), "--allow_targets", "127.0.0.0/8", "--allow_peers", "127.0.0.0/8", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(log, "wb"), start_new_session=True,
                            preexec_fn=_pdeathsig)
    lines: "queue.Queue[Optional[str]]" = queue.Queue()

    def read() -> None:
        assert proc.stdout
        for raw in proc.stdout:
            lines.put(raw.decode(errors="replace"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    addr = cert = fp = ""
    deadline = time.monotonic() + 20
    while not addr:
        try:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            proc.kill()
            raise RuntimeError(f"s2cs did not announce its control address: {log.read_text()[-2000:]}")
        if line is None:
            raise RuntimeError(f"s2cs exited ({proc.wait()}): {log.read_text()[-2000:]}")
        if "self-signed certificate " in line:
            cert = line.split("self-signed certificate ", 1)[1].split()[0]
        if "SHA-256 fingerprint " in line:
            fp = line.split("SHA-256 fingerprint ", 1)[1].split()[0]
        if line.startswith("s2cs: control API on https://"):
            addr = line.split("https://", 1)[1].split()[0]
    gw = Gateway(addr=addr, cert=cert, fingerprint=fp, ip=ip, proc=proc, log=log)
    with scistream.Client(addr, server_cert=cert, token="-", timeout=2) as c:
        def healthy() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"s2cs exited: {log.read_text()[-2000:]}")
            try:
                return c.health().status == "ok"
            except scistream.SciStreamError:
                return False
        wait_for(healthy, 20, f"s2cs at {addr} to be healthy")
    return gw


@pytest.fixture(scope="session")
def bins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("bin")
    # s2cs and s2uc only: linking s2bench too costs seconds for nothing.
    subprocess.run(["go", "build", "-o", f"{d}/", "./cmd/s2cs", "./cmd/s2uc"], cwd=REPO, check=True)
    return d


@dataclasses.dataclass
class Pair:
    """Two gateways: cons (inbound: in front of the listening application)
    and prod (outbound), with a token per identity."""

    cons: Gateway
    prod: Gateway
    tokens: dict[str, str]
    tokens_file: Path
    dir: Path
    bins: Path

    def client(self, gw: Gateway, who: str = "alice", **kw: Any) -> scistream.Client:
        return scistream.Client(gw.addr, server_cert=gw.cert, token=self.tokens[who], **kw)

    def token_file(self, who: str) -> str:
        p = self.dir / f"token-{who}"
        if not p.exists():
            p.write_text(self.tokens[who])
            p.chmod(0o600)
        return str(p)

    def stream_kw(self, who: str = "alice") -> dict[str, Any]:
        return dict(inbound=self.cons.addr, outbound=self.prod.addr, inbound_server_cert=self.cons.cert,
                    outbound_server_cert=self.prod.cert, token_file=self.token_file(who))


def write_tokens(path: Path, tokens: dict[str, str]) -> None:
    path.write_text("".join(f"{hashlib.sha256(t.encode()).hexdigest()} {who}\n" for who, t in tokens.items()))
    path.chmod(0o600)


@pytest.fixture(scope="session")
def pair(bins: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    d = tmp_path_factory.mktemp("gw")
    tokens = {who: secrets.token_hex(24) for who in IDENTITIES}
    tf = d / "tokens"
    write_tokens(tf, tokens)
    roles = d / "roles"
    roles.write_text("user any\nreader identity reader\noperator identity oper\n")
    roles.chmod(0o600)
    # capacity_rate: rates are admitted against it (a 2G stream is, a 200G
    # one is no_resources); rate_interval: rates sampled often enough for
    # a short test to see them.
    args = ["--roles", str(roles), "--capacity_rate", "100G", "--rate_interval", "200ms", "--quota_pending", "8"]
    ips = set()
    while len(ips) < 2:
        ips.add(random_loopback())
    a, b = sorted(ips)
    cons = start_gateway(str(bins / "s2cs"), d / "cons", tf, args, a)
    try:
        prod = start_gateway(str(bins / "s2cs"), d / "prod", tf, args, b)
    except BaseException:
        cons.stop()
        raise
    try:
        yield Pair(cons=cons, prod=prod, tokens=tokens, tokens_file=tf, dir=d, bins=bins)
    finally:
        prod.stop()
        cons.stop()


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test its own SCISTREAM_HOME and no configuration file or token
    from the caller's environment."""
    for k in list(os.environ):
        if k.startswith("SCISTREAM_"):
            monkeypatch.delenv(k)
    home = tmp_path / "home"
    monkeypatch.setenv("SCISTREAM_HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return home


class Echo:
    """The listening application: a TCP server on 127.0.0.1 that echoes
    every connection's bytes back and closes after the peer's end."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port = self.sock.getsockname()[1]
        self.conns = 0
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        self._stop = False
        self._t = threading.Thread(target=self._accept, daemon=True)
        self._t.start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns += 1
            self._socks.append(c)
            t = threading.Thread(target=self._serve, args=(c,), daemon=True)
            t.start()
            self._threads.append(t)

    @staticmethod
    def _serve(c: socket.socket) -> None:
        with c:
            try:
                while True:
                    b = c.recv(1 << 16)
                    if not b:
                        break
                    c.sendall(b)
                c.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self) -> None:
        self._stop = True
        self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self.sock.close()
        for c in self._socks:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._t.join(5)
        for t in self._threads:
            t.join(5)


@pytest.fixture
def echo() -> Iterator[Echo]:
    e = Echo()
    yield e
    e.close()


def roundtrip(addr: tuple[str, int], data: bytes, timeout: float = 30) -> bytes:
    """Sends data through addr and returns what came back once the far end
    closed (the echo sends it all back)."""
    with socket.create_connection(addr, timeout=timeout) as s:
        err: list[BaseException] = []

        def send() -> None:
            try:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
            except BaseException as e:  # noqa: BLE001
                err.append(e)

        t = threading.Thread(target=send)
        t.start()
        got = bytearray()
        while True:
            b = s.recv(1 << 16)
            if not b:
                break
            got += b
        t.join(timeout)
        if err:
            raise err[0]
        return bytes(got)
