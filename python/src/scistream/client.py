"""A client of one gateway's control API (every route of openapi.yaml),
synchronous (:class:`Client`) and asyncio (:class:`AsyncClient`).

A gateway is trusted with a stream, not with the client's machine or with the
other gateway, as in s2uc (internal/client/answer.go): every UID it answers is
checked before it names a URL or a local record, what the client relays to
the other gateway (listeners, nodes, server name, certificate, secret) is
checked for its form and size, and an answer that fails (:class:`BadAnswer`)
is not acted on; a stream a refused create answer names is released again.
Redirects are not followed and no proxy from the environment is used.

An answer is read as it comes, up to MAX_ANSWER bytes (16 MiB, as s2uc
reads): one that says it is longer (its Content-Length) is refused before
its body is read, one that goes on past it (chunked, or until the
connection closes) is refused there, and the connection is dropped. An
error answer's code must be one (lower-case letters and ``_``); its text
is printable in the error (scistream.errors.printable), as s2uc prints it.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import re
import secrets
import ssl
from typing import Any, Final, Iterable, Optional, Sequence, TypeVar, Union, overload
from urllib.parse import quote, urlencode

import httpx
import yaml

from . import _tls
from ._kw import keywords
from .auth import token_source
from .config import Config, Side
from .errors import BadAnswer, CertificateError, ConfigError, NotHTTPS, SciStreamError, TransportError, Unreachable, api_error
from .models import (AttachRequest, GatewayStatus, Health, Info, InboundRequest, OutboundRequest, Stream, StreamList,
                     UpdateRequest, from_json, to_json)
from .rates import parse_rate

__all__ = ["Client", "AsyncClient", "ROUTES", "valid_uid", "valid_host", "valid_host_port", "UNSET", "Unset"]

REQUEST_ID_HEADER = "X-Request-Id"
MAX_CHANNELS = 256
MAX_PEER_NODES = 64
SECRET_LEN = 32
MAX_CERT_PEM = 64 << 10
#: The most of an answer the client reads (bytes), as s2uc (internal/client).
MAX_ANSWER = 16 << 20
_CODE = re.compile(r"[a-z_]+")

#: Every operation of the control API and the method of Client (and
#: AsyncClient) that calls it; a test checks it against openapi.yaml.
ROUTES: dict[tuple[str, str], str] = {
    ("get", "/healthz"): "health",
    ("get", "/v1/openapi.yaml"): "openapi",
    ("get", "/v1/info"): "info",
    ("post", "/v1/streams/inbound"): "inbound",
    ("post", "/v1/streams/outbound"): "outbound",
    ("post", "/v1/streams/{uid}/attach"): "attach",
    ("get", "/v1/streams"): "list",
    ("get", "/v1/streams/{uid}"): "get",
    ("patch", "/v1/streams/{uid}"): "update",
    ("delete", "/v1/streams/{uid}"): "release",
    ("get", "/v1/status"): "gateway_status",
    ("get", "/metrics"): "metrics",
    ("get", "/status"): "status_page",
}


def valid_uid(uid: Any) -> bool:
    """Whether uid is a stream UID: a lower-case UUID of 36 characters
    (api.ValidUID)."""
    if not isinstance(uid, str) or len(uid) != 36:
        return False
    for i, c in enumerate(uid):
        if i in (8, 13, 18, 23):
            if c != "-":
                return False
        elif not ("0" <= c <= "9" or "a" <= c <= "f"):
            return False
    return True


def _is_ip(h: str) -> bool:
    if "%" in h:
        return False
    try:
        ipaddress.ip_address(h)
        return True
    except ValueError:
        return False


def valid_host(h: Any) -> bool:
    """Whether h is an IP address or a host name (labels of 1-63 letters,
    digits, '-' or '_', 253 characters at most)."""
    if not isinstance(h, str):
        return False
    if _is_ip(h):
        return True
    if not h or len(h) > 253:
        return False
    for label in h.split("."):
        if not label or len(label) > 63:
            return False
        if not all(c == "-" or c == "_" or c.isascii() and c.isalnum() for c in label):
            return False
    return True


def split_host_port(hp: str) -> tuple[str, str]:
    """host and port of "host:port" or "[v6]:port" (net.SplitHostPort);
    ValueError otherwise."""
    if hp.startswith("["):
        end = hp.find("]")
        if end < 0 or hp[end + 1:end + 2] != ":":
            raise ValueError(f"{hp!r} is not host:port")
        host, port = hp[1:end], hp[end + 2:]
        if "[" in host or "]" in port or "[" in port:
            raise ValueError(f"{hp!r} is not host:port")
        return host, port
    host, sep, port = hp.rpartition(":")
    if not sep or ":" in host or "[" in host or "]" in host or "[" in port or "]" in port:
        raise ValueError(f"{hp!r} is not host:port")
    return host, port


def valid_host_port(hp: Any) -> bool:
    """Whether hp is "host:port" with a valid_host and a port 1-65535 in
    plain decimal."""
    if not isinstance(hp, str):
        return False
    try:
        h, p = split_host_port(hp)
    except ValueError:
        return False
    if not valid_host(h) or not p.isascii() or not p.isdigit():
        return False
    n = int(p)
    return str(n) == p and 1 <= n <= 65535


class Unset:
    """The type of :data:`UNSET`, the default of update()'s fields: leave
    the field as it is (None could not say it: rate=0 is best effort)."""

    def __repr__(self) -> str:
        return "UNSET"


#: The default of update()'s fields: leave the field as it is.
UNSET: Final[Unset] = Unset()

#: A rate: bits per second (an int), or as people write it ("2G", "800Mbit/s",
#: "100MB/s"; scistream.rates.parse_rate).
RateArg = Union[int, str]

R = TypeVar("R")


class _Base:
    """What Client and AsyncClient share: configuration, the requests'
    paths and bodies, the answers' decoding and checks."""

    @keywords
    def __init__(self, s2cs: Optional[str] = None, *, server_cert: Optional[str] = None, token: Optional[str] = None,
                 token_file: Optional[str] = None, timeout: float = 30.0, profile: Optional[str] = None,
                 side: Side = None, config: Optional[Config] = None) -> None:
        cfg = config if config is not None else Config.load()
        st = cfg.settings(side, profile)
        prefix = f"{side}_" if side else ""
        self.addr = s2cs or st.s2cs or ""
        if not self.addr:
            raise ConfigError(f"no gateway: give s2cs='HOST:PORT' of its control API, or set SCISTREAM_S2CS or {prefix}s2cs in "
                              f"the configuration file ({cfg.path or 'none found'})")
        try:
            host, port = split_host_port(self.addr)
        except ValueError:
            host, port = "", ""
        if not host or not port.isdigit():
            raise ConfigError(f"{prefix}s2cs {self.addr!r}: want HOST:PORT of the gateway's control API, e.g. 10.0.0.5:5000")
        self.server_cert = server_cert or st.server_cert
        self._trust = _tls.trust(self.server_cert, f"{prefix}server_cert")
        self.token_file = token_file
        self._token = token_source(token, token_file, st.token_file)
        self.timeout = timeout
        self._base = f"https://{self.addr}"
        self._connect()

    def _connect(self) -> None:
        """Makes the HTTP client (httpx.Client or httpx.AsyncClient)."""
        raise NotImplementedError

    def __repr__(self) -> str:  # never the token
        return f"{type(self).__name__}({self.addr!r}, server_cert={self.server_cert!r})"

    # ---- requests ----

    def _headers(self, body: bool) -> dict[str, str]:
        # identity: the answer is read raw and bounded (a gzip body would
        # be inflated past any bound before it could be counted).
        h = {REQUEST_ID_HEADER: secrets.token_hex(13), "Accept": "application/json", "Accept-Encoding": "identity"}
        if body:
            h["Content-Type"] = "application/json"
        tok = self._token()
        if tok:
            h["Authorization"] = f"Bearer {tok}"
        return h

    @staticmethod
    def _path(uid: str, suffix: str = "") -> str:
        if not isinstance(uid, str) or uid in ("", ".", ".."):
            raise ValueError(f"uid {uid!r} is not a stream UID (a lower-case UUID)")
        return "/v1/streams/" + quote(uid, safe="") + suffix

    @staticmethod
    def _owner(owner: Optional[str]) -> str:
        return "?" + urlencode({"owner": owner}) if owner else ""

    @staticmethod
    def _list_path(all: bool, owner: Optional[str], all_owners: bool) -> str:
        q: dict[str, str] = {}
        if owner:
            q["owner"] = owner
        if all_owners:
            q["all_owners"] = "true"
        if all:
            q["all"] = "true"
        return "/v1/streams" + ("?" + urlencode(q) if q else "")

    def _inbound_body(self, req: InboundRequest | dict[str, Any] | None, kw: dict[str, Any]) -> InboundRequest:
        given = {k: v for k, v in kw.items() if v is not None}
        name = f"{type(self).__name__}.inbound()"
        if req is not None:
            if given:
                raise TypeError(f"{name}: give an InboundRequest (or its dict) or its fields as keywords, not both "
                                f"(also given: {', '.join(sorted(given))})")
            return req if isinstance(req, InboundRequest) else InboundRequest(**req)
        missing = [k for k in ("remote_ip", "receiver_ports", "num_conn") if k not in given]
        if missing:
            raise TypeError(f"{name} missing {', '.join(k + '=' for k in missing)}: give remote_ip='10.0.0.20', "
                            "receiver_ports=[8080], num_conn=1 (or an InboundRequest)")
        for k in ("rate", "min_rate"):
            if k in given:
                given[k] = parse_rate(given[k], k)
        given["receiver_ports"] = list(given["receiver_ports"])
        return InboundRequest(**given)

    @staticmethod
    def _update_body(rate: Union[RateArg, Unset], allow: Union[Iterable[str], Unset],
                     lease_s: Union[int, Unset]) -> UpdateRequest:
        body = UpdateRequest()
        if not isinstance(rate, Unset):
            body.rate = parse_rate(rate, "rate")
        if not isinstance(allow, Unset):
            body.allow = list(allow)
        if not isinstance(lease_s, Unset):
            body.lease_s = lease_s
        return body

    # ---- answers ----

    def _transport_error(self, e: BaseException) -> SciStreamError:
        if isinstance(e, TransportError):  # from the pinning check
            return type(e)(self.addr, str(e).split(": ", 1)[-1])
        cause: Optional[BaseException] = e
        seen = set()
        while cause is not None and id(cause) not in seen:
            seen.add(id(cause))
            if isinstance(cause, ssl.SSLCertVerificationError):
                what = ("the gateway's certificate does not match the one given" if self._trust.pinned else
                        "the system's trusted roots do not vouch for the gateway's certificate, and none was given")
                return CertificateError(self.addr, f"TLS verification failed ({cause.verify_message}): {what}")
            if isinstance(cause, ssl.SSLError) and cause.reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "HTTP_REQUEST"):
                return NotHTTPS(self.addr, "answered plain HTTP; the control API is HTTPS only")
            if isinstance(cause, (ConnectionRefusedError, ConnectionResetError)) or isinstance(cause, OSError) and cause.errno in (101, 110, 111, 113, -2, -3, -5):
                return Unreachable(self.addr, f"unreachable: {cause.strerror or cause}")
            cause = cause.__cause__ or cause.__context__
        if isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout)):
            return Unreachable(self.addr, f"unreachable: {e}")
        return TransportError(self.addr, f"{type(e).__name__}: {e}")

    def _begin(self, resp: httpx.Response) -> None:
        """Refuses an answer by its head, before its body is read: one
        longer than MAX_ANSWER by its Content-Length, or encoded (the client
        asked for identity)."""
        cl = resp.headers.get("content-length")
        if cl is not None:
            try:
                n = int(cl)
            except ValueError:
                n = MAX_ANSWER + 1  # longer than an int, or not one: h11 let it pass
            if n > MAX_ANSWER:
                raise self._bad(f"an answer of {cl[:40]} bytes (its Content-Length), more than the {MAX_ANSWER} the client reads")
        enc = resp.headers.get("content-encoding", "identity").strip().lower()
        if enc not in ("", "identity"):
            raise self._bad(f"an answer in Content-Encoding {enc[:40]!r}; the client asked for none")

    def _more(self, buf: bytearray, chunk: bytes) -> None:
        """Adds chunk of the body to buf, refusing the answer once it is
        longer than MAX_ANSWER."""
        if len(buf) + len(chunk) > MAX_ANSWER:
            raise self._bad(f"an answer of more than {MAX_ANSWER} bytes, which the client reads at most")
        buf += chunk

    def _answer(self, resp: httpx.Response, data: bytes) -> Any:
        # Invalid UTF-8 is U+FFFD, as Go's JSON decoder makes it in s2uc.
        text = data.decode("utf-8", "replace")
        if resp.status_code >= 300:
            try:
                body = json.loads(text)
                err = body["error"]
                code, message = err["code"], err.get("message", "")
                if not isinstance(code, str) or not code or not isinstance(message, str):
                    raise ValueError
            except (ValueError, KeyError, TypeError, AttributeError):
                raise SciStreamError(f"s2cs {self.addr}: HTTP {resp.status_code} {resp.reason_phrase}") from None
            if not _CODE.fullmatch(code):
                raise self._bad(f"HTTP {resp.status_code} with error code {code[:64]!r}, which is no code of the API "
                                "(lower-case letters and _)")
            raise api_error(code, message, status=resp.status_code,
                            request_id=resp.headers.get(REQUEST_ID_HEADER, ""), gateway=self.addr)
        ctype = resp.headers.get("content-type", "")
        if not ctype.startswith("application/json"):
            return text
        try:
            return json.loads(text)
        except ValueError as e:
            raise BadAnswer(self.addr, f"not JSON: {e}") from None

    def _health(self, resp: httpx.Response, data: bytes) -> Health:
        try:
            body = json.loads(data.decode("utf-8", "replace"))
        except ValueError:
            raise self._bad("/healthz: not JSON") from None
        return self._decode(Health, body)

    @staticmethod
    def _payload(body: Any) -> Optional[bytes]:
        if body is None:
            return None
        return json.dumps(to_json(body) if not isinstance(body, dict) else body).encode()

    def _decode(self, cls: type[R], data: Any) -> R:
        try:
            return from_json(cls, data)
        except ValueError as e:
            raise BadAnswer(self.addr, str(e)) from None

    def _bad(self, msg: str) -> BadAnswer:
        return BadAnswer(self.addr, msg)

    def _check_view(self, s: Stream, uid: Optional[str]) -> None:
        if not valid_uid(s.uid):
            raise self._bad(f"uid {s.uid[:80]!r} is not a stream UID (a lower-case UUID of 36 characters)")
        if uid and s.uid != uid:
            raise self._bad(f"asked about stream {uid[:80]!r}, answered about {s.uid}")

    def _check_created(self, s: Stream, uid: Optional[str], wan: Optional[str], inbound: bool) -> None:
        """client.checkCreated: what the wiring relays to the other gateway
        and keeps in the local record."""
        self._check_view(s, uid)
        if s.wan not in ("tls", "quic", "tcp"):
            raise self._bad(f"wan {str(s.wan)[:20]!r} is no WAN transport")
        if wan and s.wan != wan:
            # A fake inbound gateway could otherwise turn a stream to
            # plaintext legs behind the user's back.
            raise self._bad(f"asked for wan {wan!r}, answered wan {s.wan!r}")
        if not s.listeners or len(s.listeners) > MAX_CHANNELS:
            raise self._bad(f"{len(s.listeners or [])} listeners, want 1 to {MAX_CHANNELS}")
        if s.nodes and len(s.nodes) > MAX_PEER_NODES:
            raise self._bad(f"{len(s.nodes)} nodes, want at most {MAX_PEER_NODES}")
        if s.wan_server_name and not valid_host(s.wan_server_name):
            raise self._bad(f"wan_server_name {s.wan_server_name[:80]!r} is not a DNS name")
        for listener in s.listeners:
            if not valid_host_port(listener):
                raise self._bad(f"listener {str(listener)[:80]!r} is not host:port")
        for h in s.nodes or []:
            if not valid_host(h):
                raise self._bad(f"node {str(h)[:80]!r} is not a host name or IP address")
        if s.wan in ("tls", "quic"):
            pem = s.wan_cert or ""
            if len(pem) > MAX_CERT_PEM:
                raise self._bad(f"wan_cert of {len(pem)} bytes, want at most {MAX_CERT_PEM}")
            try:
                _tls.parse_one_cert_pem(pem)
            except ValueError as e:
                raise self._bad(f"wan_cert: {e}") from None
        if inbound:
            try:
                ok = len(base64.b64decode(s.secret or "", validate=True)) == SECRET_LEN
            except ValueError:
                ok = False
            if not ok:
                raise self._bad(f"secret is not the base64 of {SECRET_LEN} bytes")

    def _streams(self, data: Any) -> list[Stream]:
        out = self._decode(StreamList, data).streams
        for s in out:
            self._check_view(s, None)
        return out


class Client(_Base):
    """A client of one gateway's control API.

    ``Client("10.0.0.5:5000", server_cert="gw.crt")``. Every argument but
    s2cs is keyword-only:

    - s2cs: "HOST:PORT" of the gateway's control API;
    - server_cert: the gateway's certificate, a PEM path (pinned, or the
      CA that issued it) or "sha256:HEX"; none: the system's roots;
    - token, token_file: the bearer token, or a file holding it;
    - timeout: seconds for each request (30);
    - profile: a profile of the configuration file;
    - side: "inbound" or "outbound": that side's keys of the configuration
      file (inbound_s2cs, ...), each falling back to the plain key;
    - config: a :class:`Config` (default: the configuration file and the
      environment, as s2uc reads them; see :mod:`scistream.config`).

    s2cs, server_cert and token_file not given come from the environment
    and the configuration file, as in s2uc. The token is read once, when the
    client is made. Use as a context manager, or call close(). A keyword it
    does not take is a TypeError naming the nearest one.
    """

    _hc: httpx.Client

    def _connect(self) -> None:
        self._hc = httpx.Client(transport=_tls.transport(self._trust), timeout=self.timeout, trust_env=False,
                                follow_redirects=False)

    def close(self) -> None:
        """Closes the client's connections (idempotent)."""
        self._hc.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _roundtrip(self, method: str, path: str, payload: Optional[bytes]) -> tuple[httpx.Response, bytes]:
        """Sends one request and reads its answer, MAX_ANSWER bytes at
        most: the body is read as it comes, and a longer one is refused
        (BadAnswer) and its connection dropped."""
        req = self._hc.build_request(method, self._base + path, content=payload, headers=self._headers(payload is not None))
        try:
            resp = self._hc.send(req, stream=True)
        except (httpx.TransportError, TransportError) as e:
            raise self._transport_error(e) from None
        buf = bytearray()
        try:
            self._begin(resp)
            for chunk in resp.iter_raw():
                self._more(buf, chunk)
        except httpx.TransportError as e:
            raise self._transport_error(e) from None
        finally:
            resp.close()  # unread: the connection is closed, not reused
        return resp, bytes(buf)

    @keywords
    def request(self, method: str, path: str, body: Any = None) -> Any:
        """Sends one request (body: a model or a dict) and returns the
        decoded answer (JSON, or text for other content types)."""
        return self._answer(*self._roundtrip(method, path, self._payload(body)))

    # ---- routes ----

    def health(self) -> Health:
        """GET /healthz (no authentication): status "ok" once the gateway
        serves, "starting" (its 503) while it starts or shuts down."""
        return self._health(*self._roundtrip("GET", "/healthz", None))

    def openapi(self) -> dict[str, Any]:
        """GET /v1/openapi.yaml: the gateway's OpenAPI document, parsed."""
        doc = yaml.safe_load(str(self.request("GET", "/v1/openapi.yaml")))
        if not isinstance(doc, dict):
            raise self._bad("/v1/openapi.yaml is not a YAML mapping")
        return doc

    def info(self) -> Info:
        """GET /v1/info: the gateway and the caller's identity."""
        return self._decode(Info, self.request("GET", "/v1/info"))

    @overload
    def inbound(self, req: InboundRequest | dict[str, Any]) -> Stream: ...

    @overload
    def inbound(self, *, remote_ip: str, receiver_ports: Sequence[int], num_conn: int, uid: Optional[str] = None,
                wan: Optional[str] = None, engine: Optional[str] = None, wan_listener: Optional[str] = None,
                app_wait_s: Optional[int] = None, resume_window_s: Optional[int] = None,
                max_active_conns: Optional[int] = None, rate: Optional[RateArg] = None,
                min_rate: Optional[RateArg] = None, lease_s: Optional[int] = None) -> Stream: ...

    @keywords
    def inbound(self, req: Optional[InboundRequest | dict[str, Any]] = None, *, remote_ip: Optional[str] = None,
                receiver_ports: Optional[Sequence[int]] = None, num_conn: Optional[int] = None, uid: Optional[str] = None,
                wan: Optional[str] = None, engine: Optional[str] = None, wan_listener: Optional[str] = None,
                app_wait_s: Optional[int] = None, resume_window_s: Optional[int] = None,
                max_active_conns: Optional[int] = None, rate: Optional[RateArg] = None,
                min_rate: Optional[RateArg] = None, lease_s: Optional[int] = None) -> Stream:
        """POST /v1/streams/inbound: an InboundRequest (or its dict), or its
        fields as keywords (remote_ip, receiver_ports and num_conn
        required; rate and min_rate in bits per second, or "2G"). The answer
        is checked as s2uc checks it; a refused answer's stream is released
        again."""
        body = self._inbound_body(req, dict(
            remote_ip=remote_ip, receiver_ports=receiver_ports, num_conn=num_conn, uid=uid, wan=wan, engine=engine,
            wan_listener=wan_listener, app_wait_s=app_wait_s, resume_window_s=resume_window_s,
            max_active_conns=max_active_conns, rate=rate,
            min_rate=min_rate, lease_s=lease_s))
        s = self._decode(Stream, self.request("POST", "/v1/streams/inbound", body))
        self._checked_or_undo(s, body.uid, body.wan, True)
        return s

    @keywords
    def outbound(self, req: OutboundRequest | dict[str, Any]) -> Stream:
        """POST /v1/streams/outbound, the answer checked as inbound's."""
        body = req if isinstance(req, OutboundRequest) else OutboundRequest(**req)
        s = self._decode(Stream, self.request("POST", "/v1/streams/outbound", body))
        self._checked_or_undo(s, body.uid, body.wan, False)
        return s

    def _checked_or_undo(self, s: Stream, uid: Optional[str], wan: Optional[str], inbound: bool) -> None:
        try:
            self._check_created(s, uid, wan, inbound)
        except BadAnswer as e:
            if valid_uid(s.uid):
                try:
                    self.release(s.uid)
                except SciStreamError as re:
                    raise BadAnswer(self.addr, f"{str(e).split('answer refused: ', 1)[-1]}; release {s.uid} again: {re}") from None
            raise

    @keywords
    def attach(self, uid: str, peer_cert: Optional[str] = None, rate: Optional[RateArg] = None) -> Stream:
        """POST /v1/streams/{uid}/attach on the inbound gateway: the outbound
        gateway's certificate (PEM), and the rate it granted (bits per
        second, or "2G")."""
        body = AttachRequest(peer_cert=peer_cert, rate=parse_rate(rate, "rate") if rate is not None else None)
        s = self._decode(Stream, self.request("POST", self._path(uid, "/attach"), body))
        self._check_view(s, uid)
        return s

    @keywords
    def get(self, uid: str, *, owner: Optional[str] = None) -> Stream:
        """GET /v1/streams/{uid}: one stream, with its live counters
        (owner: another identity's, for an operator or a reader)."""
        s = self._decode(Stream, self.request("GET", self._path(uid) + self._owner(owner)))
        self._check_view(s, uid)
        return s

    @keywords
    def list(self, all: bool = False, *, owner: Optional[str] = None, all_owners: bool = False) -> list[Stream]:
        """GET /v1/streams: the caller's live streams (all=True: ended ones
        too; owner: another identity's, all_owners: everyone's, for an
        operator or a reader)."""
        return self._streams(self.request("GET", self._list_path(all, owner, all_owners)))

    @keywords
    def update(self, uid: str, *, rate: Union[RateArg, Unset] = UNSET, allow: Union[Iterable[str], Unset] = UNSET,
               lease_s: Union[int, Unset] = UNSET, owner: Optional[str] = None) -> Stream:
        """PATCH /v1/streams/{uid}: the fields given change, the others stay
        (rate in bits per second or "2G", 0: best effort; allow: the
        prefixes that may connect; lease_s: seconds from now)."""
        s = self._decode(Stream, self.request("PATCH", self._path(uid) + self._owner(owner), self._update_body(rate, allow, lease_s)))
        self._check_view(s, uid)
        return s

    @keywords
    def release(self, uid: str, *, owner: Optional[str] = None) -> Stream:
        """DELETE /v1/streams/{uid}: ends the stream on this gateway and
        returns its final view. Releasing an ended stream again is no
        error: its view is returned as it is (state released, expired or
        failed); one the gateway no longer knows (pruned after its
        retention, 24 hours by default) is NotFound."""
        s = self._decode(Stream, self.request("DELETE", self._path(uid) + self._owner(owner)))
        self._check_view(s, uid)
        return s

    def gateway_status(self) -> GatewayStatus:
        """GET /v1/status: the gateway's health and the live streams: the
        caller's own, or every identity's for a reader or an operator
        (``scope``)."""
        st = self._decode(GatewayStatus, self.request("GET", "/v1/status"))
        for s in st.streams:
            self._check_view(s, None)
        return st

    def metrics(self) -> str:
        """GET /metrics: the Prometheus exposition (readers and operators)."""
        return str(self.request("GET", "/metrics"))

    def status_page(self) -> str:
        """GET /status: the status page's HTML (no authentication)."""
        return str(self.request("GET", "/status"))


class AsyncClient(_Base):
    """The asyncio twin of :class:`Client`: the same arguments and methods,
    awaited (``async with scistream.AsyncClient(...) as c``, aclose())."""

    _hc: httpx.AsyncClient

    def _connect(self) -> None:
        self._hc = httpx.AsyncClient(transport=_tls.async_transport(self._trust), timeout=self.timeout, trust_env=False,
                                     follow_redirects=False)

    async def aclose(self) -> None:
        """Closes the client's connections (idempotent)."""
        await self._hc.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def _roundtrip(self, method: str, path: str, payload: Optional[bytes]) -> tuple[httpx.Response, bytes]:
        req = self._hc.build_request(method, self._base + path, content=payload, headers=self._headers(payload is not None))
        try:
            resp = await self._hc.send(req, stream=True)
        except (httpx.TransportError, TransportError) as e:
            raise self._transport_error(e) from None
        buf = bytearray()
        try:
            self._begin(resp)
            async for chunk in resp.aiter_raw():
                self._more(buf, chunk)
        except httpx.TransportError as e:
            raise self._transport_error(e) from None
        finally:
            await resp.aclose()
        return resp, bytes(buf)

    @keywords
    async def request(self, method: str, path: str, body: Any = None) -> Any:
        """As Client.request, awaited."""
        return self._answer(*await self._roundtrip(method, path, self._payload(body)))

    async def health(self) -> Health:
        """As Client.health (GET /healthz), awaited."""
        return self._health(*await self._roundtrip("GET", "/healthz", None))

    async def openapi(self) -> dict[str, Any]:
        """As Client.openapi (GET /v1/openapi.yaml), awaited."""
        doc = yaml.safe_load(str(await self.request("GET", "/v1/openapi.yaml")))
        if not isinstance(doc, dict):
            raise self._bad("/v1/openapi.yaml is not a YAML mapping")
        return doc

    async def info(self) -> Info:
        """As Client.info (GET /v1/info), awaited."""
        return self._decode(Info, await self.request("GET", "/v1/info"))

    @overload
    async def inbound(self, req: InboundRequest | dict[str, Any]) -> Stream: ...

    @overload
    async def inbound(self, *, remote_ip: str, receiver_ports: Sequence[int], num_conn: int, uid: Optional[str] = None,
                      wan: Optional[str] = None, engine: Optional[str] = None, wan_listener: Optional[str] = None,
                      app_wait_s: Optional[int] = None, resume_window_s: Optional[int] = None,
                      max_active_conns: Optional[int] = None,
                      rate: Optional[RateArg] = None, min_rate: Optional[RateArg] = None,
                      lease_s: Optional[int] = None) -> Stream: ...

    @keywords
    async def inbound(self, req: Optional[InboundRequest | dict[str, Any]] = None, *, remote_ip: Optional[str] = None,
                      receiver_ports: Optional[Sequence[int]] = None, num_conn: Optional[int] = None,
                      uid: Optional[str] = None, wan: Optional[str] = None, engine: Optional[str] = None,
                      wan_listener: Optional[str] = None, app_wait_s: Optional[int] = None,
                      resume_window_s: Optional[int] = None, max_active_conns: Optional[int] = None, rate: Optional[RateArg] = None,
                      min_rate: Optional[RateArg] = None, lease_s: Optional[int] = None) -> Stream:
        """As Client.inbound (POST /v1/streams/inbound), awaited."""
        body = self._inbound_body(req, dict(
            remote_ip=remote_ip, receiver_ports=receiver_ports, num_conn=num_conn, uid=uid, wan=wan, engine=engine,
            wan_listener=wan_listener, app_wait_s=app_wait_s, resume_window_s=resume_window_s,
            max_active_conns=max_active_conns, rate=rate,
            min_rate=min_rate, lease_s=lease_s))
        s = self._decode(Stream, await self.request("POST", "/v1/streams/inbound", body))
        await self._checked_or_undo(s, body.uid, body.wan, True)
        return s

    @keywords
    async def outbound(self, req: OutboundRequest | dict[str, Any]) -> Stream:
        """As Client.outbound (POST /v1/streams/outbound), awaited."""
        body = req if isinstance(req, OutboundRequest) else OutboundRequest(**req)
        s = self._decode(Stream, await self.request("POST", "/v1/streams/outbound", body))
        await self._checked_or_undo(s, body.uid, body.wan, False)
        return s

    async def _checked_or_undo(self, s: Stream, uid: Optional[str], wan: Optional[str], inbound: bool) -> None:
        try:
            self._check_created(s, uid, wan, inbound)
        except BadAnswer as e:
            if valid_uid(s.uid):
                try:
                    await self.release(s.uid)
                except SciStreamError as re:
                    raise BadAnswer(self.addr, f"{str(e).split('answer refused: ', 1)[-1]}; release {s.uid} again: {re}") from None
            raise

    @keywords
    async def attach(self, uid: str, peer_cert: Optional[str] = None, rate: Optional[RateArg] = None) -> Stream:
        """As Client.attach (POST /v1/streams/{uid}/attach), awaited."""
        body = AttachRequest(peer_cert=peer_cert, rate=parse_rate(rate, "rate") if rate is not None else None)
        s = self._decode(Stream, await self.request("POST", self._path(uid, "/attach"), body))
        self._check_view(s, uid)
        return s

    @keywords
    async def get(self, uid: str, *, owner: Optional[str] = None) -> Stream:
        """As Client.get (GET /v1/streams/{uid}), awaited."""
        s = self._decode(Stream, await self.request("GET", self._path(uid) + self._owner(owner)))
        self._check_view(s, uid)
        return s

    @keywords
    async def list(self, all: bool = False, *, owner: Optional[str] = None, all_owners: bool = False) -> list[Stream]:
        """As Client.list (GET /v1/streams), awaited."""
        return self._streams(await self.request("GET", self._list_path(all, owner, all_owners)))

    @keywords
    async def update(self, uid: str, *, rate: Union[RateArg, Unset] = UNSET, allow: Union[Iterable[str], Unset] = UNSET,
                     lease_s: Union[int, Unset] = UNSET, owner: Optional[str] = None) -> Stream:
        """As Client.update (PATCH /v1/streams/{uid}), awaited."""
        s = self._decode(Stream, await self.request("PATCH", self._path(uid) + self._owner(owner), self._update_body(rate, allow, lease_s)))
        self._check_view(s, uid)
        return s

    @keywords
    async def release(self, uid: str, *, owner: Optional[str] = None) -> Stream:
        """As Client.release (DELETE /v1/streams/{uid}; an ended stream's
        view as it is), awaited."""
        s = self._decode(Stream, await self.request("DELETE", self._path(uid) + self._owner(owner)))
        self._check_view(s, uid)
        return s

    async def gateway_status(self) -> GatewayStatus:
        """As Client.gateway_status (GET /v1/status), awaited."""
        st = self._decode(GatewayStatus, await self.request("GET", "/v1/status"))
        for s in st.streams:
            self._check_view(s, None)
        return st

    async def metrics(self) -> str:
        """As Client.metrics (GET /metrics), awaited."""
        return str(await self.request("GET", "/metrics"))

    async def status_page(self) -> str:
        """As Client.status_page (GET /status), awaited."""
        return str(await self.request("GET", "/status"))
