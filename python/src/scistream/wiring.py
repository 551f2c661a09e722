"""A whole stream across two gateways in one call, as ``s2uc stream`` does
(cmd/s2uc/stream.go, client.Wire): the inbound request on the gateway in front
of the application that listens, the outbound request on the gateway in front
of the one that connects (with the inbound side's listeners, certificate and
secret), then the attach of the outbound gateway's certificate on the inbound
side. A failure releases every side already created. The stream is kept in
s2uc's local record (``$SCISTREAM_HOME/streams/UID.json``, 0600), so that
``s2uc status UID`` and ``s2uc release UID`` find it.

``with scistream.stream(...) as s`` releases both sides when the block ends,
also on an exception or a KeyboardInterrupt (outbound first, as s2uc
release). Releasing a released stream again is no error: release() returns
a :class:`Released` whose ``already_released`` says so, as ``s2uc release``
says "already released".
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as _dt
import json
import os
import re
import time
from pathlib import Path
from typing import Any, AsyncIterator, Iterable, Iterator, Optional, Sequence, TypeVar, Union

from . import _display as _d
from . import _files
from ._kw import keywords
from .auth import home
from .client import UNSET, AsyncClient, Client, RateArg, Unset, valid_uid
from .config import Config, config_path
from .errors import ConfigError, NotFound, SciStreamError, printable
from .models import InboundRequest, LastError, OutboundRequest, Stats, Stream, format_time, parse_time
from .rates import parse_rate

__all__ = ["stream", "astream", "WiredStream", "AsyncWiredStream", "RateSample", "StreamStatus", "Released", "settle",
           "Sessions"]

#: The listening application: (address, port) or (address, [ports]), as the
#: inbound gateway reaches it.
Target = tuple[str, Union[int, Sequence[int]]]
#: A duration: seconds, "30s", "2h", "1h30m" or a timedelta.
Duration = Union[int, str, _dt.timedelta]


def _duration_s(v: Union[None, int, float, str, _dt.timedelta], what: str) -> Optional[int]:
    """Whole seconds of 30, "30s", "2h", "1h30m" or a timedelta; None stays None."""
    if v is None:
        return None
    if isinstance(v, _dt.timedelta):
        secs = v.total_seconds()
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        secs = float(v)
    elif isinstance(v, str):
        m = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", v.strip())
        if not v.strip() or not m:
            raise ConfigError(f"{what} {v!r}: give a duration such as 30s, 10m or 2h")
        h, mi, s = (int(x or 0) for x in m.groups())
        secs = h * 3600 + mi * 60 + s
    else:
        raise ConfigError(f"{what} {v!r}: give seconds or a duration such as 2h")
    if secs < 0 or secs != int(secs):
        raise ConfigError(f"{what} {v!r}: give a whole number of seconds, 0 or more")
    return int(secs)


def settle(out: OutboundRequest, inb: Stream) -> None:
    """client.Settle: the outbound request asks for what the inbound side
    granted (its rate, no more than out asks; the least rate the inbound
    request accepted; its lease, unless out gives its own)."""
    if inb.rate and (not out.rate or out.rate > inb.rate):
        out.rate = inb.rate
    if out.rate and not out.min_rate:
        out.min_rate = min(inb.min_rate or 0, out.rate) or None
    if not out.lease_s:
        out.lease_s = inb.lease_s


#: How long a released stream's record is kept (s2uc's releasedKept).
RELEASED_KEPT = _dt.timedelta(days=30)


#: The most of a local record read (bytes).
MAX_RECORD = 1 << 20


class Sessions:
    """s2uc's local records of the streams it wired (client.Sessions):
    one 0600 JSON file per stream under $SCISTREAM_HOME/streams.

    s2uc status and release reach the gateways a record names, with the
    user's token: a record, or its directory, that others can write or
    own is neither read nor written (ConfigError naming the chmod or
    chown; scistream._files)."""

    def __init__(self, dir: Optional[os.PathLike[str] | str] = None) -> None:
        self.dir = Path(dir) if dir is not None else home() / "streams"

    def path(self, uid: str) -> Optional[Path]:
        """The record's path of stream uid; None for a uid that is not
        one (no path is made of it)."""
        return self.dir / f"{uid}.json" if valid_uid(uid) else None

    def check(self) -> None:
        """Refuses the records' directory (and the one it is in) when
        others can write or own it (ConfigError); one not yet made is no
        error."""
        _files.check_dir(str(self.dir), "stream records directory")

    def save(self, sess: dict[str, Any]) -> None:
        """Writes the record sess (0600, atomically: a temporary file
        renamed), its directory made 0700 and checked first."""
        p = self.path(sess.get("uid", ""))
        if p is None:
            raise ValueError(f"no record of uid {sess.get('uid')!r:.80}: not a stream UID")
        _files.make_dirs(str(self.dir))
        self.check()
        tmp = p.with_name(p.name + ".tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(sess, f, indent=2)
        os.replace(tmp, p)

    def load(self, uid: str) -> Optional[dict[str, Any]]:
        """The record of stream uid, None if there is none; ConfigError for
        one others could have written (its directory checked too)."""
        p = self.path(uid)
        if p is None:
            return None
        self.check()
        try:
            data = _files.read(str(p), "stream record", MAX_RECORD)
        except FileNotFoundError:
            return None
        sess: dict[str, Any] = json.loads(data)
        return sess

    def released(self, uid: str, gone: list[str], views: list[Stream]) -> None:
        """Drops the sides whose gateways (control addresses in gone) no
        longer hold stream uid; once none is left the record stays, without
        its secret, saying when and by whom the stream was released (the
        first released view's time and reason), as s2uc release leaves it,
        and records released more than 30 days ago are pruned."""
        sess = self.load(uid)
        if sess is None or sess.get("released"):
            return
        for addr in gone:
            for side in ("outbound", "inbound"):
                if (sess.get(side) or {}).get("s2cs") == addr:
                    sess.pop(side)
                    break
        if sess.get("inbound") or sess.get("outbound"):
            self.save(sess)
            return
        at = views[0].updated if views else _dt.datetime.now(_dt.timezone.utc)
        sess["released"] = {"at": format_time(at.astimezone(_dt.timezone.utc))}
        if views and views[0].reason:
            sess["released"]["by"] = views[0].reason
        sess["secret"] = ""  # nothing left to wire with it
        self.save(sess)
        self.prune_released(_dt.datetime.now(_dt.timezone.utc) - RELEASED_KEPT)

    def prune_released(self, before: _dt.datetime) -> None:
        """Removes the records of streams released before before (a record
        that cannot be read is left alone)."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return
        for name in names:
            uid = name[:-5] if name.endswith(".json") else ""
            if not valid_uid(uid):
                continue
            try:
                sess = self.load(uid)
                at = parse_time(sess["released"]["at"]) if sess and sess.get("released") else None
            except (ValueError, KeyError, TypeError, OSError):
                continue
            if at is not None and at < before:
                self.remove(uid)

    def remove(self, uid: str) -> None:
        """Removes the record of stream uid (none is no error)."""
        p = self.path(uid)
        if p is not None:
            try:
                p.unlink()
            except FileNotFoundError:
                pass


def _abs(p: Optional[str]) -> Optional[str]:
    if not p or p.startswith("sha256:"):
        return p or None
    return os.path.abspath(p)


def _endpoint(c: Union[Client, AsyncClient], listeners: list[str], **extra: Any) -> dict[str, Any]:
    e: dict[str, Any] = {"s2cs": c.addr}
    if c.server_cert:
        e["server_cert"] = _abs(c.server_cert)
    if c.token_file:
        e["token_file"] = _abs(c.token_file)
    e["listeners"] = listeners
    e.update({k: v for k, v in extra.items() if v})
    return e


@dataclasses.dataclass(repr=False)
class RateSample:
    """One reading of a stream's rates, at its outbound gateway. "to the
    listener" is the direction from the connecting application to the
    listening one; "to the connector" the other.

    The rates (``*_Bps``) are bytes per second: the bytes the gateway
    carried in its last sampling interval (``stats.rates.interval_s``,
    s2cs --rate_interval) over that interval. A reserved rate is bits per
    second ("50M": 50 Mbit/s, 6.25 MB/s); one sample can be above it by a
    burst of the pacing (50 ms of the rate) while the mean keeps to it."""

    time: float
    to_listener_Bps: float
    to_connector_Bps: float
    bytes_to_listener: int
    bytes_to_connector: int
    active_conns: int
    stats: Stats

    @property
    def bytes(self) -> int:
        """The bytes carried both ways so far."""
        return self.bytes_to_listener + self.bytes_to_connector

    @property
    def rate_Bps(self) -> float:
        """Both directions' rates, bytes per second."""
        return self.to_listener_Bps + self.to_connector_Bps

    @property
    def interval_s(self) -> Optional[float]:
        """The gateway's sampling interval (seconds) the rates are over;
        None when the gateway did not say."""
        return self.stats.rates.interval_s if self.stats is not None and self.stats.rates else None

    def __repr__(self) -> str:
        return _d.one_line("RateSample", [
            ("to_listener", _d.bytes_rate(self.to_listener_Bps)), ("to_connector", _d.bytes_rate(self.to_connector_Bps)),
            ("bytes_to_listener", self.bytes_to_listener), ("bytes_to_connector", self.bytes_to_connector),
            ("active_conns", self.active_conns)])

    def _repr_html_(self) -> str:
        over = f"over the gateway's last {self.interval_s:g} s" if self.interval_s else "over the gateway's last sampling interval"
        return _d.table("Rate sample (outbound gateway)", [
            ("to the listener", f"{_d.bytes_rate(self.to_listener_Bps)} {over}, {_d.nbytes(self.bytes_to_listener)} so far"),
            ("to the connector", f"{_d.bytes_rate(self.to_connector_Bps)} {over}, {_d.nbytes(self.bytes_to_connector)} so far"),
            ("connections", f"{self.active_conns} active"),
        ], _d.UNITS)


@dataclasses.dataclass(repr=False)
class StreamStatus:
    """Both sides of a stream as their gateways see them now. errors()
    says why data does not flow, in the gateways' words."""

    inbound: Stream
    outbound: Stream

    @property
    def uid(self) -> str:
        """The stream's UID."""
        return self.inbound.uid

    def errors(self) -> list[str]:
        """The latest end of each kind on either side, with the gateway's
        reason, most recent first: "inbound gateway: app_unreachable at
        2024-05-01 10:00:00 UTC: application 10.0.0.20:8080 not reachable
        for 30s: ...". Empty when neither gateway saw one. Printable (a
        gateway's text cannot drive the terminal)."""
        found: list[tuple[_dt.datetime, str]] = []
        for side, view in (("inbound", self.inbound), ("outbound", self.outbound)):
            for kind, le in ((view.stats.last_errors or {}) if view.stats else {}).items():
                found.append((le.time, f"{side} gateway: {printable(kind)} at {_d.when(le.time)}: {printable(le.reason)}"))
        return [line for _, line in sorted(found, key=lambda f: f[0], reverse=True)]

    def _latest(self) -> Optional[tuple[str, str, LastError]]:
        """The most recent last error of either side: (side, kind, error)."""
        found: list[tuple[str, str, LastError]] = []
        for side, view in (("inbound", self.inbound), ("outbound", self.outbound)):
            le = view.stats.latest_error() if view.stats else None
            if le is not None:
                found.append((side, le[0], le[1]))
        return max(found, key=lambda f: f[2].time, default=None)

    def __repr__(self) -> str:
        last = self._latest()
        return _d.one_line("StreamStatus", [
            ("uid", self.uid), ("inbound", self.inbound.state), ("outbound", self.outbound.state),
            ("last_error", f"{last[0]}: {last[1]}: {last[2].reason}" if last else None)])

    def _repr_html_(self) -> str:
        ins, outs = dict(self.inbound._rows()), dict(self.outbound._rows())
        labels = list(dict.fromkeys([*ins, *outs]))
        labels = [k for k in labels if not k.startswith("last ")] + [k for k in labels if k.startswith("last ")]
        return _d.columns(f"Stream {self.uid}", ["inbound gateway", "outbound gateway"],
                          [(k, [ins.get(k), outs.get(k)]) for k in labels if k != "uid"], _d.UNITS)


class Released(list[Stream]):
    """What release() did: a list of the views of the sides it released
    now (outbound first), and ``already_released``, True when there was
    nothing left to release: this object had released the stream, ``s2uc
    release`` had (the local record said so), or neither gateway knows it
    any more. Either way the stream is released: a retried cleanup is no
    error."""

    def __init__(self, uid: Optional[str], views: Iterable[Stream] = (), *, already_released: bool = False) -> None:
        super().__init__(views)
        self.uid = uid
        self.already_released = already_released

    def __repr__(self) -> str:
        return (f"Released(uid={self.uid!r}, already_released={self.already_released!r}, "
                f"sides={[v.role for v in self]!r})")

    def __str__(self) -> str:
        if self.already_released and not self:
            return f"stream {self.uid} already released"
        return f"stream {self.uid} released" + (" (already released before)" if self.already_released else "")


class _Spec:
    """What stream() was asked for, checked before any request. Its
    arguments are stream()'s and astream()'s (a test keeps the three
    signatures the same); caller names the one called, in errors."""

    def __init__(self, inbound: Optional[str], outbound: Optional[str], target: Target, *, num_conn: int = 1,
                 rate: Optional[RateArg] = None, min_rate: Optional[RateArg] = None,
                 lease: Optional[Duration] = None, allow: Optional[Iterable[str]] = None,
                 wan: str = "tls", engine: Optional[str] = None, wan_pool: int = 0, wan_listener: Optional[str] = None,
                 app_wait: Optional[Duration] = None, resume_window: Optional[Duration] = None, max_active_conns: int = 0, stripe: int = 1,
                 peer_listeners: Optional[Iterable[str]] = None,
                 inbound_server_cert: Optional[str] = None, outbound_server_cert: Optional[str] = None,
                 server_cert: Optional[str] = None, token_file: Optional[str] = None,
                 inbound_token_file: Optional[str] = None, outbound_token_file: Optional[str] = None,
                 token: Optional[str] = None, profile: Optional[str] = None, timeout: float = 30.0,
                 config: Optional[Config] = None, sessions: Optional[Sessions] = None, caller: str = "stream") -> None:
        if not isinstance(target, tuple) or len(target) != 2 or not isinstance(target[0], str) or not target[0]:
            raise ConfigError(f"target {target!r}: give (address, port) of the application that listens, e.g. ('10.0.0.5', 8080)")
        ports = [target[1]] if isinstance(target[1], int) else list(target[1])
        if not ports or any(isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= 65535 for p in ports):
            raise ConfigError(f"target port(s) {target[1]!r}: give a port 1-65535 or a list of them")
        if isinstance(num_conn, bool) or not isinstance(num_conn, int) or not 1 <= num_conn <= 256:
            raise ConfigError(f"num_conn {num_conn!r} out of range: give 1 to 256")
        if max_active_conns < 0:
            raise ConfigError(f"max_active_conns {max_active_conns}: give the most connections the stream relays at once, "
                              "or 0 for the gateway's cap")
        self.rate = parse_rate(rate, "rate") if rate is not None else None
        self.min_rate = parse_rate(min_rate, "min_rate") if min_rate is not None else None
        if (self.min_rate or 0) > (self.rate or 0):
            raise ConfigError(f"min_rate {min_rate} is more than rate {rate}")
        self.lease_s = _duration_s(lease, "lease")
        if self.lease_s == 0:
            raise ConfigError("lease 0: give a positive duration, e.g. 2h, or None for the gateway's default")
        self.app_wait_s = _duration_s(app_wait, "app_wait")
        self.resume_window_s = _duration_s(resume_window, "resume_window")
        if isinstance(stripe, bool) or not isinstance(stripe, int) or not 1 <= stripe <= 16:
            raise ConfigError(f"stripe {stripe!r} out of range: give 1 (one WAN leg) to 16 legs at once per connection "
                              "(at most the outbound gateway's max_stripe)")
        if stripe > 1 and wan != "tls":
            raise ConfigError(f"stripe {stripe} with wan {wan!r}: striping carries tls legs (a QUIC connection's streams "
                              "share one flow; tcp legs carry no frames); use wan='tls', or stripe=1")
        self.stripe = stripe
        self.remote_ip, self.ports = target[0], ports
        self.num_conn, self.wan, self.engine = num_conn, wan, engine
        self.wan_pool, self.wan_listener, self.max_active_conns = wan_pool, wan_listener, max_active_conns
        self.allow = list(allow or [])
        self.peer_listeners = list(peer_listeners or [])
        cfg = config if config is not None else Config.load()
        _gateways(caller, cfg, profile, inbound, outbound)
        self.sessions = sessions or Sessions()
        self.client_kw: dict[str, dict[str, Any]] = {
            "inbound": dict(s2cs=inbound, server_cert=inbound_server_cert or server_cert,
                            token_file=inbound_token_file or token_file, token=token, profile=profile, side="inbound",
                            timeout=timeout, config=cfg),
            "outbound": dict(s2cs=outbound, server_cert=outbound_server_cert or server_cert,
                             token_file=outbound_token_file or token_file, token=token, profile=profile, side="outbound",
                             timeout=timeout, config=cfg),
        }

    def inbound_request(self) -> InboundRequest:
        return InboundRequest(remote_ip=self.remote_ip, receiver_ports=self.ports, num_conn=self.num_conn,
                              wan=self.wan or None, engine=self.engine or None, wan_listener=self.wan_listener or None,
                              app_wait_s=self.app_wait_s, resume_window_s=self.resume_window_s,
                              max_active_conns=self.max_active_conns or None,
                              rate=self.rate or None, min_rate=self.min_rate or None, lease_s=self.lease_s)

    def outbound_request(self, created: Stream) -> OutboundRequest:
        """client.Wire: the outbound request relays what the inbound side
        answered."""
        out = OutboundRequest(uid=created.uid, peer_listeners=list(created.listeners), num_conn=self.num_conn,
                              secret=created.secret or "", peer_cert=created.wan_cert, wan=created.wan,
                              peer_server_name=created.wan_server_name or None, peer_nodes=created.nodes or None,
                              allow=self.allow or None, engine=self.engine or None, wan_pool=self.wan_pool or None,
                              max_active_conns=self.max_active_conns or None, resume_window_s=self.resume_window_s,
                              stripe=self.stripe if self.stripe > 1 else None)
        settle(out, created)
        if self.peer_listeners:
            out.peer_listeners = list(self.peer_listeners)
        return out

    def record(self, inc: Union[Client, AsyncClient], outc: Union[Client, AsyncClient], ins: Stream, outs: Stream) -> dict[str, Any]:
        sess: dict[str, Any] = {"uid": ins.uid, "wan": ins.wan, "secret": ins.secret}
        for k in ("rate", "min_rate", "lease_s"):
            if getattr(ins, k):
                sess[k] = getattr(ins, k)
        sess["inbound"] = _endpoint(inc, list(ins.listeners), wan_cert=ins.wan_cert, server_name=ins.wan_server_name, nodes=ins.nodes)
        sess["outbound"] = _endpoint(outc, list(outs.listeners))
        return sess


def _gateways(caller: str, cfg: Config, profile: Optional[str], inbound: Optional[str], outbound: Optional[str]) -> None:
    """Refuses a stream() whose gateways neither the arguments nor the
    configuration give, saying what stream() takes (inbound=, outbound=)
    and which keys of which file would give them."""
    missing = []
    if not inbound and not cfg.settings("inbound", profile).s2cs:
        missing.append("inbound")
    if not outbound and not cfg.settings("outbound", profile).s2cs:
        missing.append("outbound")
    if not missing:
        return
    where = f"the configuration file {cfg.path}" if cfg.path else f"a configuration file (there is none at {config_path()})"
    what = {"inbound": "inbound: the control API of the gateway in front of the application that listens, at target",
            "outbound": "outbound: the control API of the gateway in front of the application that connects"}
    raise ConfigError(f"no {' and no '.join(m + ' gateway' for m in missing)}: give "
                      f"{caller}({', '.join(m + '=' + repr('HOST:PORT') for m in missing)}, ...) "
                      f"({'; '.join(what[m] for m in missing)}), or set {' and '.join(m + '_s2cs' for m in missing)} "
                      f"(or s2cs) in {where}, or SCISTREAM_S2CS; see docs/python.md")


def _update_request(rate: Union[RateArg, Unset], allow: Union[Iterable[str], Unset],
                    lease: Union[Duration, Unset]) -> dict[str, Any]:
    req: dict[str, Any] = {}
    if not isinstance(rate, Unset):
        req["rate"] = parse_rate(rate, "rate")
    if not isinstance(allow, Unset):
        req["allow"] = list(allow)
    if not isinstance(lease, Unset):
        lease_s = _duration_s(lease, "lease")
        if not lease_s:
            raise ConfigError(f"lease {lease!r}: give a positive duration, e.g. 2h")
        req["lease_s"] = lease_s
    if not req:
        raise ConfigError("nothing to update: give rate=, allow= or lease=")
    return req


C = TypeVar("C", Client, AsyncClient)


def _sides(req: dict[str, Any], inc: C, outc: C) -> list[tuple[str, C, dict[str, Any]]]:
    """The updates of each side, inbound first; the inbound side has no
    allow-list (its legs are authenticated by certificate)."""
    out: list[tuple[str, C, dict[str, Any]]] = []
    r_in = {k: v for k, v in req.items() if k != "allow"}
    if r_in:
        out.append(("inbound", inc, r_in))
    out.append(("outbound", outc, dict(req)))
    return out


def _note(e: BaseException, what: str) -> None:
    """Says which step failed, keeping the exception's class (NoResources
    stays NoResources)."""
    if hasattr(e, "add_note"):
        e.add_note(f"scistream: {what}")


def _join(errs: list[BaseException]) -> Optional[BaseException]:
    if not errs:
        return None
    if len(errs) == 1:
        return errs[0]
    return SciStreamError("; ".join(str(e) for e in errs))


class _Sides:
    """What both wired streams show of their two sides."""

    inbound: Optional[Stream]
    outbound: Optional[Stream]
    _spec: "_Spec"
    #: The sides not released yet, outbound first (empty before open()).
    _left: list[str]
    #: Every side is released (by this object, or its gateway no longer knew it).
    _done: bool
    _closed: bool

    def _init_sides(self) -> None:
        self.inbound = None
        self.outbound = None
        self._left, self._done, self._closed = [], False, False

    @property
    def uid(self) -> Optional[str]:
        """The stream's UID (None before it is wired)."""
        return self.inbound.uid if self.inbound else None

    @property
    def released(self) -> bool:
        """Whether release() has released every side."""
        return self._done

    def __repr__(self) -> str:  # never the secret
        return f"{type(self).__name__}(uid={self.uid!r}, listeners={self.listeners!r})"

    @property
    def listeners(self) -> list[str]:
        """Where the connecting application connects ("host:port", one per channel)."""
        return list(self.outbound.listeners) if self.outbound else []

    @property
    def listener(self) -> tuple[str, int]:
        """The first listener as (host, port), for socket.create_connection."""
        from .client import split_host_port
        h, p = split_host_port(self.listeners[0])
        return h, int(p)

    def _opened(self, inc: Union[Client, AsyncClient], outc: Union[Client, AsyncClient],
                created: Stream, ins: Stream, outs: Stream) -> None:
        """Keeps both sides of a stream just wired through inc and outc (ins
        with the secret and certificate of its creation, created) and its
        local record."""
        sp = self._spec
        ins.secret, ins.wan_cert = created.secret, created.wan_cert
        self.inbound, self.outbound = ins, outs
        self._left, self._done = ["outbound", "inbound"], False
        try:
            sp.sessions.save(sp.record(inc, outc, ins, outs))
        except (OSError, SciStreamError) as e:
            import warnings
            warnings.warn(f"could not save the local record of {ins.uid} ({e}); release it on each gateway", stacklevel=3)

    def _release_first(self) -> Optional[Released]:
        """What release() answers before any request: a Released if there
        is nothing left to release; None if sides are left. A closed object
        whose sides are left cannot release them: the error says what
        will."""
        if not self._left:
            return Released(self.uid, already_released=self._done)
        if self._closed:
            sides = " and ".join(self._left) + (" side was" if len(self._left) == 1 else " sides were")
            raise SciStreamError(f"stream {self.uid}: the {sides} not released, and this stream object is closed: "
                                 f"release it with s2uc release {self.uid}")
        return None

    def _recorded_released(self, uid: str) -> bool:
        """Whether the local record says the stream was released (by s2uc
        release, while this object held it)."""
        try:
            sess = self._spec.sessions.load(uid)
        except (OSError, ValueError, SciStreamError):
            return False
        return bool(sess and sess.get("released"))

    def _release_done(self, uid: str, before: bool, out: list[Stream], gone: list[str],
                      errs: list[BaseException]) -> Released:
        """Keeps what a release did in the local record and says it."""
        self._done = not self._left
        try:
            self._spec.sessions.released(uid, gone, out)
        except (OSError, ValueError, SciStreamError) as e:
            errs.append(SciStreamError(f"keep the record of released stream {uid}: {e}"))
        return Released(uid, out, already_released=before or (self._done and not out))


class WiredStream(_Sides):
    """A stream across two gateways, wired by open() (or entering the with
    block) and released by close() (or leaving it).

    uid, listeners (where the connecting application connects: the
    outbound gateway's listeners), inbound and outbound (each side as its
    gateway answered the wiring; inbound holds the secret, never printed).
    """

    def __init__(self, spec: _Spec) -> None:
        self._spec = spec
        self.inbound_client = Client(**spec.client_kw["inbound"])
        try:
            self.outbound_client = Client(**spec.client_kw["outbound"])
        except BaseException:
            self.inbound_client.close()
            raise
        self._init_sides()

    def open(self) -> "WiredStream":
        """Wires the stream: the inbound request, the outbound request, the
        attach (as s2uc stream); a failure releases what was made, and the
        exception keeps its class. Entering the with block calls it."""
        sp, inc, outc = self._spec, self.inbound_client, self.outbound_client
        sp.sessions.check()  # before any stream is made: its record will be kept there
        created = inc.inbound(sp.inbound_request())
        try:
            out_req = sp.outbound_request(created)
            try:
                outs = outc.outbound(out_req)
            except SciStreamError as e:
                _note(e, f"outbound request to {outc.addr}")
                raise
            try:
                ins = inc.attach(created.uid, peer_cert=outs.wan_cert, rate=outs.rate)
            except BaseException as e:
                try:
                    outc.release(created.uid)
                except SciStreamError as re:
                    raise SciStreamError(f"attach outbound gateway to inbound side on {inc.addr}: {e}; "
                                         f"roll back outbound side on {outc.addr}: {re}") from e
                _note(e, f"attach outbound gateway to inbound side on {inc.addr}")
                raise
        except BaseException as e:
            try:
                inc.release(created.uid)
            except SciStreamError as re:
                raise SciStreamError(f"{e}; roll back inbound side on {inc.addr}: {re}") from e
            raise
        self._opened(inc, outc, created, ins, outs)
        return self

    def status(self) -> StreamStatus:
        """Both sides as their gateways see them now (GET each); its
        errors() say why data does not flow."""
        assert self.uid
        return StreamStatus(inbound=self.inbound_client.get(self.uid), outbound=self.outbound_client.get(self.uid))

    def sample(self) -> RateSample:
        """One reading of the stream's rates at the outbound gateway."""
        assert self.uid
        return _sample(self.outbound_client.get(self.uid))

    @keywords
    def rates(self, interval: float = 1.0, count: Optional[int] = None, progress: bool = False) -> Iterator[RateSample]:
        """Live rates: a RateSample every interval seconds (count of them,
        or until the stream ends or the loop breaks). progress=True shows a
        tqdm bar of the bytes carried, where tqdm is installed. A sample's
        rates are bytes per second over the gateway's sampling interval
        (RateSample)."""
        bar = _bar(progress)
        n, last = 0, 0
        try:
            while count is None or n < count:
                if n:
                    time.sleep(interval)
                s = self.sample()
                n += 1
                if bar is not None:
                    bar.update(s.bytes - last)
                    bar.set_postfix_str(_postfix(s))
                last = s.bytes
                yield s
                if s.stats is None:
                    return
        finally:
            if bar is not None:
                bar.close()

    @keywords
    def update(self, *, rate: Union[RateArg, Unset] = UNSET, allow: Union[Iterable[str], Unset] = UNSET,
               lease: Union[Duration, Unset] = UNSET) -> StreamStatus:
        """Changes the running stream on both gateways as s2uc update does:
        its rate ("2G", bits per second, 0 for best effort), its allow-list
        (the outbound side's) or its lease ("2h" from now), without
        dropping its connections. The inbound side first; if the outbound
        side refuses a higher rate, the inbound side is set back, so both
        keep to the same rate."""
        assert self.uid and self.inbound and self.outbound
        req = _update_request(rate, allow, lease)
        sides = _sides(req, self.inbound_client, self.outbound_client)
        raised: list[tuple[Client, int]] = []
        views: dict[str, Stream] = {}
        for side, c, r in sides:
            before = c.get(self.uid)
            try:
                views[side] = c.update(self.uid, **r)
            except SciStreamError as e:
                for rc, old in raised:  # set back what was raised, so both sides agree
                    try:
                        rc.update(self.uid, rate=old)
                    except SciStreamError as re:
                        _note(e, f"set the rate back on {rc.addr}: {re}")
                _note(e, f"update on {c.addr}")
                raise
            if "rate" in r and r["rate"] > (before.rate or 0):
                raised.append((c, before.rate or 0))
        self._updated(views)
        return StreamStatus(inbound=views.get("inbound") or self.inbound_client.get(self.uid),
                            outbound=views.get("outbound") or self.outbound_client.get(self.uid))

    def _updated(self, views: dict[str, Stream]) -> None:
        ins = views.get("inbound")
        if ins is not None and self.inbound is not None:
            # What a later outbound request would ask for (settle), in the local record.
            self.inbound.rate, self.inbound.min_rate, self.inbound.lease_s = ins.rate, ins.min_rate, ins.lease_s
            try:
                sess = self._spec.sessions.load(ins.uid)
                if sess is not None:
                    for k in ("rate", "min_rate", "lease_s"):
                        if getattr(ins, k):
                            sess[k] = getattr(ins, k)
                        else:
                            sess.pop(k, None)
                    self._spec.sessions.save(sess)
            except OSError:
                pass
            except (ValueError, SciStreamError) as e:  # a record others could have written is left as it is
                import warnings
                warnings.warn(f"the local record of {ins.uid} was not updated: {e}", stacklevel=3)
        if views.get("outbound") is not None and self.outbound is not None:
            o = views["outbound"]
            self.outbound.rate, self.outbound.allow, self.outbound.lease_s = o.rate, o.allow, o.lease_s

    def release(self) -> Released:
        """Releases both sides (outbound first, as s2uc release); a side its
        gateway no longer knows counts as released. The local record then
        says the stream was released, when and by whom, as s2uc release
        leaves it. Idempotent: once released, it returns at once a
        Released with already_released=True (as s2uc release says "already
        released"); a side that failed to release is tried again by the
        next call."""
        first = self._release_first()
        if first is not None:
            return first
        uid = self.uid or ""
        before = self._recorded_released(uid)
        out: list[Stream] = []
        gone: list[str] = []
        errs: list[BaseException] = []
        interrupted: Optional[BaseException] = None
        for side in list(self._left):
            c = self.outbound_client if side == "outbound" else self.inbound_client
            try:
                out.append(c.release(uid))
                gone.append(c.addr)
                self._left.remove(side)
            except NotFound:
                gone.append(c.addr)
                self._left.remove(side)
            except SciStreamError as e:
                errs.append(SciStreamError(f"release {uid} on {c.addr} ({side}): {e}"))
            except BaseException as e:  # a second Ctrl-C: release the other side all the same
                interrupted = interrupted or e
        done = self._release_done(uid, before, out, gone, errs)
        if interrupted is not None:
            raise interrupted
        err = _join(errs)
        if err is not None:
            raise err
        return done

    def close(self) -> None:
        """Releases the stream (release()) and closes both clients;
        leaving the with block calls it."""
        try:
            self.release()
        finally:
            self._closed = True
            self.inbound_client.close()
            self.outbound_client.close()

    def __enter__(self) -> "WiredStream":
        try:
            return self.open()
        except BaseException:
            self.inbound_client.close()
            self.outbound_client.close()
            raise

    def __exit__(self, typ: Any, exc: Optional[BaseException], tb: Any) -> None:
        try:
            self.close()
        except BaseException as e:
            if exc is None:
                raise
            # The block's own exception goes on; the failed release is said with it.
            if hasattr(exc, "add_note"):
                exc.add_note(f"scistream: releasing stream {self.uid} failed too: {e}")


def _sample(s: Stream) -> RateSample:
    st = s.stats
    if st is None:
        return RateSample(time.time(), 0.0, 0.0, 0, 0, 0, None)  # type: ignore[arg-type]
    return RateSample(time.time(), st.rate_to_wan_Bps, st.rate_from_wan_Bps, st.bytes_to_wan, st.bytes_from_wan,
                      st.active_conns, st)


def _bar(progress: bool) -> Any:
    if not progress:
        return None
    try:
        from tqdm.auto import tqdm  # type: ignore[import-untyped]
    except ImportError:
        return None
    return tqdm(unit="B", unit_scale=True, unit_divisor=1000, desc="stream")


def _postfix(s: RateSample) -> str:
    return f"{s.to_listener_Bps * 8 / 1e6:.1f} Mbit/s to listener, {s.to_connector_Bps * 8 / 1e6:.1f} Mbit/s to connector"


@keywords
def stream(inbound: Optional[str] = None, outbound: Optional[str] = None, target: Target = ("", 0), *,
           num_conn: int = 1, rate: Optional[RateArg] = None, min_rate: Optional[RateArg] = None,
           lease: Optional[Duration] = None, allow: Optional[Iterable[str]] = None, wan: str = "tls",
           engine: Optional[str] = None, wan_pool: int = 0, wan_listener: Optional[str] = None,
           app_wait: Optional[Duration] = None, resume_window: Optional[Duration] = None, max_active_conns: int = 0, stripe: int = 1,
           peer_listeners: Optional[Iterable[str]] = None, inbound_server_cert: Optional[str] = None,
           outbound_server_cert: Optional[str] = None, server_cert: Optional[str] = None,
           token_file: Optional[str] = None, inbound_token_file: Optional[str] = None,
           outbound_token_file: Optional[str] = None, token: Optional[str] = None, profile: Optional[str] = None,
           timeout: float = 30.0, config: Optional[Config] = None, sessions: Optional[Sessions] = None) -> WiredStream:
    """A stream from the application that connects (behind the outbound
    gateway) to the one that listens at target=(address, port) (behind the
    inbound gateway), as ``s2uc stream``. Use it as a context manager::

        with scistream.stream(inbound="10.0.0.5:5000", outbound="10.1.0.7:5000",
                              target=("10.0.0.20", 8080), num_conn=2, rate="2G") as s:
            connect_producer(s.listeners)

    inbound, outbound: "HOST:PORT" of each gateway's control API (default:
    inbound_s2cs and outbound_s2cs, else s2cs, of the configuration file,
    or SCISTREAM_S2CS). The other arguments are keyword-only:

    - num_conn: channels, 1 to 256 (1);
    - rate, min_rate: the reserved rate and the least one accepted, bits
      per second (an int, "2G", "800Mbit/s") or bytes ("100MB/s"); none:
      best effort;
    - lease: the stream's lifetime, "2h", seconds or a timedelta (the
      gateway's default);
    - allow: prefixes that may connect to the outbound listeners;
    - wan ("tls", "quic", "tcp"), engine, wan_pool, wan_listener, app_wait
      (how long the inbound gateway tries to reach the application),
      resume_window (how long a connection whose WAN leg is lost waits for
      a new one, on both gateways; 0: not at all), max_active_conns,
      stripe (WAN legs at once per connection, tls; the inbound gateway
      grants it or keeps one leg), peer_listeners (NAT): as s2uc stream's
      flags;
    - server_cert, inbound_server_cert, outbound_server_cert: a gateway's
      certificate, PEM path or "sha256:HEX";
    - token_file, inbound_token_file, outbound_token_file, token: the
      bearer token; profile: a profile of the configuration file;
    - timeout: seconds per request (30); config: a Config; sessions: where
      the local records are (s2uc's, by default).

    Gateways and credentials not given come from the environment and the
    configuration file, as for s2uc; neither giving a gateway is a
    ConfigError naming inbound= and outbound=. A keyword it does not take
    is a TypeError naming the nearest one.
    """
    return WiredStream(_Spec(inbound, outbound, target, num_conn=num_conn, rate=rate, min_rate=min_rate, lease=lease, allow=allow, wan=wan,
                 engine=engine, wan_pool=wan_pool, wan_listener=wan_listener, app_wait=app_wait, resume_window=resume_window, stripe=stripe,
                 max_active_conns=max_active_conns, peer_listeners=peer_listeners,
                 inbound_server_cert=inbound_server_cert, outbound_server_cert=outbound_server_cert,
                 server_cert=server_cert, token_file=token_file, inbound_token_file=inbound_token_file,
                 outbound_token_file=outbound_token_file, token=token, profile=profile, timeout=timeout,
                 config=config, sessions=sessions, caller="stream"))


class AsyncWiredStream(_Sides):
    """The asyncio twin of WiredStream: ``async with scistream.astream(...) as s``."""

    def __init__(self, spec: _Spec) -> None:
        self._spec = spec
        self.inbound_client = AsyncClient(**spec.client_kw["inbound"])
        self.outbound_client = AsyncClient(**spec.client_kw["outbound"])
        self._init_sides()

    async def open(self) -> "AsyncWiredStream":
        """As WiredStream.open, awaited; ``async with`` calls it."""
        sp, inc, outc = self._spec, self.inbound_client, self.outbound_client
        sp.sessions.check()
        created = await inc.inbound(sp.inbound_request())
        try:
            out_req = sp.outbound_request(created)
            try:
                outs = await outc.outbound(out_req)
            except SciStreamError as e:
                _note(e, f"outbound request to {outc.addr}")
                raise
            try:
                ins = await inc.attach(created.uid, peer_cert=outs.wan_cert, rate=outs.rate)
            except BaseException as e:
                try:
                    await asyncio.shield(outc.release(created.uid))
                except SciStreamError as re:
                    raise SciStreamError(f"attach outbound gateway to inbound side on {inc.addr}: {e}; "
                                         f"roll back outbound side on {outc.addr}: {re}") from e
                _note(e, f"attach outbound gateway to inbound side on {inc.addr}")
                raise
        except BaseException as e:
            try:
                await asyncio.shield(inc.release(created.uid))
            except SciStreamError as re:
                raise SciStreamError(f"{e}; roll back inbound side on {inc.addr}: {re}") from e
            raise
        self._opened(inc, outc, created, ins, outs)
        return self

    async def status(self) -> StreamStatus:
        """As WiredStream.status, awaited (both sides at once)."""
        assert self.uid
        i, o = await asyncio.gather(self.inbound_client.get(self.uid), self.outbound_client.get(self.uid))
        return StreamStatus(inbound=i, outbound=o)

    async def sample(self) -> RateSample:
        """As WiredStream.sample, awaited."""
        assert self.uid
        return _sample(await self.outbound_client.get(self.uid))

    @keywords
    def rates(self, interval: float = 1.0, count: Optional[int] = None, progress: bool = False) -> AsyncIterator[RateSample]:
        """As WiredStream.rates: ``async for r in s.rates(interval=1)``."""
        return self._rates(interval, count, progress)

    async def _rates(self, interval: float, count: Optional[int], progress: bool) -> AsyncIterator[RateSample]:
        bar = _bar(progress)
        n, last = 0, 0
        try:
            while count is None or n < count:
                if n:
                    await asyncio.sleep(interval)
                s = await self.sample()
                n += 1
                if bar is not None:
                    bar.update(s.bytes - last)
                    bar.set_postfix_str(_postfix(s))
                last = s.bytes
                yield s
                if s.stats is None:
                    return
        finally:
            if bar is not None:
                bar.close()

    @keywords
    async def update(self, *, rate: Union[RateArg, Unset] = UNSET, allow: Union[Iterable[str], Unset] = UNSET,
                     lease: Union[Duration, Unset] = UNSET) -> StreamStatus:
        """As WiredStream.update."""
        assert self.uid and self.inbound and self.outbound
        req = _update_request(rate, allow, lease)
        raised: list[tuple[AsyncClient, int]] = []
        views: dict[str, Stream] = {}
        for side, c, r in _sides(req, self.inbound_client, self.outbound_client):
            before = await c.get(self.uid)
            try:
                views[side] = await c.update(self.uid, **r)
            except SciStreamError as e:
                for rc, old in raised:
                    try:
                        await asyncio.shield(rc.update(self.uid, rate=old))
                    except SciStreamError as re:
                        _note(e, f"set the rate back on {rc.addr}: {re}")
                _note(e, f"update on {c.addr}")
                raise
            if "rate" in r and r["rate"] > (before.rate or 0):
                raised.append((c, before.rate or 0))
        WiredStream._updated(self, views)  # type: ignore[arg-type]
        return StreamStatus(inbound=views.get("inbound") or await self.inbound_client.get(self.uid),
                            outbound=views.get("outbound") or await self.outbound_client.get(self.uid))

    async def release(self) -> Released:
        """As WiredStream.release, awaited; the releases are shielded, so a
        cancelled task still releases both sides."""
        first = self._release_first()
        if first is not None:
            return first
        uid = self.uid or ""
        before = self._recorded_released(uid)
        out: list[Stream] = []
        gone: list[str] = []
        errs: list[BaseException] = []
        for side in list(self._left):
            c = self.outbound_client if side == "outbound" else self.inbound_client
            try:
                # Shielded: a cancelled task still releases both sides.
                out.append(await asyncio.shield(c.release(uid)))
                gone.append(c.addr)
                self._left.remove(side)
            except NotFound:
                gone.append(c.addr)
                self._left.remove(side)
            except SciStreamError as e:
                errs.append(SciStreamError(f"release {uid} on {c.addr} ({side}): {e}"))
        done = self._release_done(uid, before, out, gone, errs)
        err = _join(errs)
        if err is not None:
            raise err
        return done

    async def aclose(self) -> None:
        """Releases the stream and closes both clients; leaving the
        ``async with`` block calls it."""
        try:
            await self.release()
        finally:
            self._closed = True
            await self.inbound_client.aclose()
            await self.outbound_client.aclose()

    async def __aenter__(self) -> "AsyncWiredStream":
        try:
            return await self.open()
        except BaseException:
            await self.inbound_client.aclose()
            await self.outbound_client.aclose()
            raise

    async def __aexit__(self, typ: Any, exc: Optional[BaseException], tb: Any) -> None:
        try:
            await self.aclose()
        except BaseException as e:
            if exc is None:
                raise
            if hasattr(exc, "add_note"):
                exc.add_note(f"scistream: releasing stream {self.uid} failed too: {e}")


@keywords
def astream(inbound: Optional[str] = None, outbound: Optional[str] = None, target: Target = ("", 0), *,
            num_conn: int = 1, rate: Optional[RateArg] = None, min_rate: Optional[RateArg] = None,
            lease: Optional[Duration] = None, allow: Optional[Iterable[str]] = None, wan: str = "tls",
            engine: Optional[str] = None, wan_pool: int = 0, wan_listener: Optional[str] = None,
            app_wait: Optional[Duration] = None, resume_window: Optional[Duration] = None, max_active_conns: int = 0, stripe: int = 1,
            peer_listeners: Optional[Iterable[str]] = None, inbound_server_cert: Optional[str] = None,
            outbound_server_cert: Optional[str] = None, server_cert: Optional[str] = None,
            token_file: Optional[str] = None, inbound_token_file: Optional[str] = None,
            outbound_token_file: Optional[str] = None, token: Optional[str] = None, profile: Optional[str] = None,
            timeout: float = 30.0, config: Optional[Config] = None, sessions: Optional[Sessions] = None) -> AsyncWiredStream:
    """The asyncio variant of stream(), with the same arguments:
    ``async with scistream.astream(...) as s``."""
    return AsyncWiredStream(_Spec(inbound, outbound, target, num_conn=num_conn, rate=rate, min_rate=min_rate,
                            lease=lease, allow=allow, wan=wan, engine=engine, wan_pool=wan_pool, wan_listener=wan_listener, app_wait=app_wait, resume_window=resume_window, stripe=stripe,
                            max_active_conns=max_active_conns, peer_listeners=peer_listeners,
                            inbound_server_cert=inbound_server_cert, outbound_server_cert=outbound_server_cert,
                            server_cert=server_cert, token_file=token_file, inbound_token_file=inbound_token_file,
                            outbound_token_file=outbound_token_file, token=token, profile=profile, timeout=timeout,
                            config=config, sessions=sessions, caller="astream"))
