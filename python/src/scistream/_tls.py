"""How the client trusts a gateway's control API, as s2uc does.

server_cert is either a PEM file holding the gateway's own certificate (often
self-signed; pinned exactly) or the CA that issued it (then the certificate
must be issued for the gateway's address), or ``sha256:<64 hex>``, the
fingerprint of the gateway's certificate (``s2uc info`` and GET /v1/info's
wan_cert_sha256 show it). Without one, the system's roots verify the gateway.

The check runs inside the TLS connect, before any HTTP byte (and so the
token) is sent: a network backend wraps httpcore's and checks the peer's
certificate right after the handshake.

A server_cert file is refused when group or others can write it or its
directory, or when someone other than the user or root owns one of them
(scistream._files): whoever could write it could name their own gateway's
certificate.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
import ssl
from typing import Any, Callable, Iterable, Optional

import httpcore
import httpx

from . import _files
from .errors import CertificateError, ConfigError

_PEM = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.S)
_FP = re.compile(r"^sha256:([0-9a-fA-F]{64})$")


def pem_blocks(data: bytes) -> list[tuple[str, bytes]]:
    """The (type, DER) of each PEM block in data."""
    out = []
    for m in _PEM.finditer(data):
        try:
            der = base64.b64decode(b"".join(m.group(2).split()), validate=True)
        except ValueError:
            raise ValueError("a PEM block is not base64") from None
        out.append((m.group(1).decode(), der))
    return out


def parse_one_cert_pem(pem: str) -> bytes:
    """The DER of a PEM text holding exactly one certificate, as
    certs.ParsePEM accepts it (the X.509 parsed by OpenSSL); ValueError
    otherwise."""
    data = pem.encode("utf-8", "replace")
    m = _PEM.search(data)
    if not m or data[: m.start()].strip() or m.group(1) != b"CERTIFICATE":
        raise ValueError("not a PEM certificate")
    if data[m.end():].strip(b" \r\n\t"):
        raise ValueError("more than one PEM block; give the leaf certificate only")
    (_, der), = pem_blocks(data[m.start(): m.end()])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        ctx.load_verify_locations(cadata=der)
    except ssl.SSLError:
        raise ValueError("not an X.509 certificate") from None
    return der


def fingerprint(der: bytes) -> str:
    """The lower-case hex SHA-256 of a certificate's DER."""
    return hashlib.sha256(der).hexdigest()


Check = Callable[[Any, str], None]


class Trust:
    """The TLS context and the post-handshake check of one gateway."""

    def __init__(self, ctx: ssl.SSLContext, check: Optional[Check], pinned: bool) -> None:
        self.ctx = ctx
        self.check = check
        self.pinned = pinned


def _base_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def _host_matches(cert: dict[str, Any], host: str) -> bool:
    try:
        ip: Optional[ipaddress._BaseAddress] = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    for kind, value in cert.get("subjectAltName", ()):
        if ip is not None and kind == "IP Address":
            try:
                if ipaddress.ip_address(value.strip()) == ip:
                    return True
            except ValueError:
                continue
        elif ip is None and kind == "DNS":
            pat = value.lower().rstrip(".")
            h = host.lower().rstrip(".")
            if pat == h or (pat.startswith("*.") and "." in h and h.split(".", 1)[1] == pat[2:]):
                return True
    return False


def trust(server_cert: Optional[str], where: str = "server_cert") -> Trust:
    """The trust of a gateway given server_cert (a PEM path, sha256:HEX, or
    None for the system's roots). ConfigError names where for a value it
    cannot use."""
    if not server_cert:
        return Trust(ssl.create_default_context(), None, False)
    m = _FP.match(server_cert.strip())
    if m:
        want = m.group(1).lower()
        ctx = _base_context()
        ctx.check_hostname = False
        # The fingerprint is the whole check (made in check_fp below,
        # before any byte is sent): the chain is not verified.
        ctx.verify_mode = ssl.CERT_NONE

        def check_fp(sslobj: Any, host: str) -> None:
            der = sslobj.getpeercert(True)
            if not der:
                raise CertificateError(host, "TLS verification failed: the gateway sent no certificate")
            if fingerprint(der) != want:
                raise CertificateError(host, "TLS verification failed: the gateway's certificate does not match the one given "
                                             f"(its sha256 is {fingerprint(der)})")
        return Trust(ctx, check_fp, True)
    try:
        # The pin says which certificate is the gateway's: a file someone
        # else could have written is refused (_files).
        data = _files.read(server_cert, where, 1 << 20)
    except OSError as e:
        raise ConfigError(f"{where} {server_cert}: {e.strerror}") from None
    try:
        ders = [der for typ, der in pem_blocks(data) if typ == "CERTIFICATE"]
    except ValueError as e:
        raise ConfigError(f"{where} {server_cert}: {e}") from None
    if not ders:
        raise ConfigError(f"{where} {server_cert}: no PEM certificate in file; give the gateway's certificate "
                          "(s2cs prints its path at start) or sha256:<fingerprint>")
    ctx = _base_context()
    # The certificates given are trust anchors whether or not they are CAs
    # (partial chain): the gateway's own certificate is pinned exactly;
    # a certificate a given CA issued must also name the gateway (check).
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    try:
        for der in ders:
            ctx.load_verify_locations(cadata=der)
    except ssl.SSLError as e:
        raise ConfigError(f"{where} {server_cert}: {e.reason or e}") from None
    pinned = {bytes(d) for d in ders}

    def check_pem(sslobj: Any, host: str) -> None:
        der = sslobj.getpeercert(True)
        if der in pinned:
            return  # exact pin
        if not _host_matches(sslobj.getpeercert() or {}, host):
            raise CertificateError(host, "TLS verification failed: the gateway's certificate does not match the one given "
                                         f"(issued by it, but not for {host})")
    return Trust(ctx, check_pem, True)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, check: Check, host: str) -> None:
        self._inner, self._check, self._host = inner, check, host

    def read(self, max_bytes: int, timeout: Optional[float] = None) -> bytes:
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: Optional[float] = None) -> None:
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: Optional[str] = None,
                  timeout: Optional[float] = None) -> httpcore.NetworkStream:
        s = self._inner.start_tls(ssl_context, server_hostname, timeout)
        try:
            self._check(s.get_extra_info("ssl_object"), self._host)
        except BaseException:
            s.close()
            raise
        return s

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, check: Check) -> None:
        self._inner = httpcore.SyncBackend()
        self._check = check

    def connect_tcp(self, host: str, port: int, timeout: Optional[float] = None, local_address: Optional[str] = None,
                    socket_options: Optional[Iterable[Any]] = None) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options), self._check, host)

    def connect_unix_socket(self, path: str, timeout: Optional[float] = None,
                            socket_options: Optional[Iterable[Any]] = None) -> httpcore.NetworkStream:
        raise OSError("unix sockets are not used")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _AStream(httpcore.AsyncNetworkStream):
    def __init__(self, inner: httpcore.AsyncNetworkStream, check: Check, host: str) -> None:
        self._inner, self._check, self._host = inner, check, host

    async def read(self, max_bytes: int, timeout: Optional[float] = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: Optional[float] = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: Optional[str] = None,
                        timeout: Optional[float] = None) -> httpcore.AsyncNetworkStream:
        s = await self._inner.start_tls(ssl_context, server_hostname, timeout)
        try:
            self._check(s.get_extra_info("ssl_object"), self._host)
        except BaseException:
            await s.aclose()
            raise
        return s

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _ABackend(httpcore.AsyncNetworkBackend):
    def __init__(self, check: Check) -> None:
        self._inner = httpcore.AnyIOBackend()
        self._check = check

    async def connect_tcp(self, host: str, port: int, timeout: Optional[float] = None, local_address: Optional[str] = None,
                          socket_options: Optional[Iterable[Any]] = None) -> httpcore.AsyncNetworkStream:
        inner = await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _AStream(inner, self._check, host)

    async def connect_unix_socket(self, path: str, timeout: Optional[float] = None,
                                  socket_options: Optional[Iterable[Any]] = None) -> httpcore.AsyncNetworkStream:
        raise OSError("unix sockets are not used")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


_LIMITS = dict(max_connections=8, max_keepalive_connections=4, keepalive_expiry=5.0)


def transport(t: Trust) -> httpx.HTTPTransport:
    """An httpx transport that checks the gateway's certificate with t."""
    tr = httpx.HTTPTransport(verify=t.ctx)
    if t.check is not None:
        tr._pool = httpcore.ConnectionPool(ssl_context=t.ctx, network_backend=_Backend(t.check), **_LIMITS)  # type: ignore[arg-type]
    return tr


def async_transport(t: Trust) -> httpx.AsyncHTTPTransport:
    tr = httpx.AsyncHTTPTransport(verify=t.ctx)
    if t.check is not None:
        tr._pool = httpcore.AsyncConnectionPool(ssl_context=t.ctx, network_backend=_ABackend(t.check), **_LIMITS)  # type: ignore[arg-type]
    return tr
