"""The control API's request and answer bodies as dataclasses.

Each class is named as its schema in the gateway's OpenAPI document
(``internal/api/openapi.yaml``, served at ``GET /v1/openapi.yaml``) and each
field as the JSON field, with the schema's type: a required field has no
default, an optional one defaults to None (absent). A test compares every
class with its schema, so the two cannot drift apart.

Answers are decoded leniently (a field a newer gateway adds is ignored);
requests are encoded without their None fields, which the gateway then takes
as absent.

A stream's secret is in no model's repr (nor str, pprint or any printer that
follows the dataclass's fields' repr flag): notebooks echo the last
expression, and notebooks are shared. to_json keeps it: it is the request's
body.

Stream, Stats, Info and GatewayStatus have a one-line repr (the UID, role,
state and the key numbers; the fields are all there as attributes) and a
small HTML table for notebooks (``_repr_html_``), every text of the
gateway's escaped; rates say their unit (scistream._display: a reserved rate
is bits per second, a sampled one bytes per second over the gateway's
sampling interval).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import re
import types
import typing
from typing import Any, Optional, Union

from . import _display as _d
from .rates import format_rate

__all__ = [
    "InboundRequest", "OutboundRequest", "AttachRequest", "UpdateRequest",
    "Stream", "StreamList", "Channel", "Stats", "LastError", "Rates", "DirRate", "RateRun",
    "RateStat", "RateHistory", "Info", "NodeInfo", "GatewayStatus", "GatewayHealth", "Health",
    "from_json", "to_json",
]

@dataclasses.dataclass(kw_only=True)
class InboundRequest:
    """Asks the gateway in front of the listening application to open
    num_conn WAN listeners that lead to remote_ip:receiver_ports."""

    remote_ip: str
    receiver_ports: list[int]
    num_conn: int
    uid: Optional[str] = None
    wan: Optional[str] = None
    engine: Optional[str] = None
    wan_listener: Optional[str] = None
    app_wait_s: Optional[int] = None
    resume_window_s: Optional[int] = None
    max_active_conns: Optional[int] = None
    rate: Optional[int] = None
    min_rate: Optional[int] = None
    lease_s: Optional[int] = None


@dataclasses.dataclass(kw_only=True)
class OutboundRequest:
    """Asks the gateway in front of the connecting application to open
    num_conn LAN listeners leading to peer_listeners."""

    uid: str
    peer_listeners: list[str]
    num_conn: int
    secret: str = dataclasses.field(repr=False)  # never printed
    peer_nodes: Optional[list[str]] = None
    peer_cert: Optional[str] = None
    allow: Optional[list[str]] = None
    wan: Optional[str] = None
    engine: Optional[str] = None
    peer_server_name: Optional[str] = None
    wan_pool: Optional[int] = None
    resume_window_s: Optional[int] = None
    # WAN legs at once each application connection is carried on
    # (striping); None or 1: one. At most the gateway's max_stripe.
    stripe: Optional[int] = None
    max_active_conns: Optional[int] = None
    rate: Optional[int] = None
    min_rate: Optional[int] = None
    lease_s: Optional[int] = None


@dataclasses.dataclass(kw_only=True)
class AttachRequest:
    """Completes an inbound stream with the outbound gateway's certificate."""

    peer_cert: Optional[str] = None
    rate: Optional[int] = None


@dataclasses.dataclass(kw_only=True)
class UpdateRequest:
    """Changes a running stream; None fields stay as they are (rate=0 makes
    the stream best effort)."""

    rate: Optional[int] = None
    allow: Optional[list[str]] = None
    lease_s: Optional[int] = None


@dataclasses.dataclass(kw_only=True)
class Channel:
    """One channel of a stream served by a node of a facility: its
    listener, and the node that serves it."""

    channel: int
    listener: str
    node: Optional[str] = None


@dataclasses.dataclass(kw_only=True)
class LastError:
    """The most recent end of one kind (Stats.last_errors' key): the
    gateway's reason and when it was seen."""

    reason: str
    time: _dt.datetime


@dataclasses.dataclass(kw_only=True)
class RateStat:
    """The mean, standard deviation and peak of a set of rate samples,
    in bytes per second."""

    samples: int
    mean_Bps: float
    stddev_Bps: float
    peak_Bps: float


@dataclasses.dataclass(kw_only=True)
class RateRun:
    """A run of consecutive samples in which bytes moved: its start, its
    bytes and its steady state (ended: the run is over)."""

    start: _dt.datetime
    samples: int
    bytes: int
    ended: bool
    steady: RateStat


@dataclasses.dataclass(kw_only=True)
class DirRate:
    """One direction's sampled rates: over the stream's life, over the
    last window, over its steady state, and its latest run."""

    life: RateStat
    window: RateStat
    steady: RateStat
    last_run: Optional[RateRun] = None


@dataclasses.dataclass(kw_only=True)
class RateHistory:
    """The samples of the last window, oldest first, the last one at end
    (GET /v1/status only)."""

    end: _dt.datetime
    to_wan_Bps: list[float]
    from_wan_Bps: list[float]


@dataclasses.dataclass(kw_only=True)
class Rates:
    """A stream's sampled rates on one gateway: a sample every interval_s
    seconds (the bytes moved since the previous one over the time between
    them, in bytes per second), per direction."""

    interval_s: float
    window_s: float
    trim_samples: int
    to_wan: DirRate
    from_wan: DirRate
    history: Optional[RateHistory] = None


@dataclasses.dataclass(kw_only=True, repr=False)
class Stats:
    """A stream's live counters on one gateway ("to_wan": from this gateway's
    application towards the peer gateway). rate_to_wan_Bps and
    rate_from_wan_Bps are bytes per second over the gateway's last sampling
    interval (rates.interval_s); last_errors, the latest end of each kind
    with the gateway's reason (why data does not flow)."""

    active_conns: int
    waiting_conns: int
    total_conns: int
    rejected_conns: int
    over_cap_conns: int
    aborted_conns: int
    errors: int
    bytes_to_wan: int
    bytes_from_wan: int
    rate_to_wan_Bps: float
    rate_from_wan_Bps: float
    aborted_by_kind: Optional[dict[str, int]] = None
    legs_created: Optional[int] = None
    legs_reused: Optional[int] = None
    legs_torn_down: Optional[int] = None
    legs_idle: Optional[int] = None
    wan_redials: Optional[int] = None
    peer_flaps: Optional[int] = None
    resume: Optional[str] = None
    parked_conns: Optional[int] = None
    resumed_legs: Optional[int] = None
    resent_bytes: Optional[int] = None
    parked_seconds: Optional[float] = None
    resume_expired: Optional[int] = None
    # The WAN legs at once the latest connection was granted.
    stripe_legs: Optional[int] = None
    peer: Optional[str] = None
    last_errors: Optional[dict[str, LastError]] = None
    rates: Optional[Rates] = None

    def latest_error(self) -> Optional[tuple[str, LastError]]:
        """The most recent of last_errors, as (kind, LastError); None if
        there is none."""
        if not self.last_errors:
            return None
        return max(self.last_errors.items(), key=lambda kv: kv[1].time)

    def __repr__(self) -> str:
        last = self.latest_error()
        return _d.one_line("Stats", [
            ("active_conns", self.active_conns), ("total_conns", self.total_conns), ("errors", self.errors),
            ("bytes_to_wan", self.bytes_to_wan), ("bytes_from_wan", self.bytes_from_wan),
            ("rate_to_wan", _d.bytes_rate(self.rate_to_wan_Bps)), ("rate_from_wan", _d.bytes_rate(self.rate_from_wan_Bps)),
            ("last_error", f"{last[0]}: {last[1].reason}" if last else None)])

    def _rows(self) -> list[tuple[str, Any]]:
        """The rows of its HTML table: (label, text)."""
        interval = f"{self.rates.interval_s:g} s" if self.rates else "the gateway's sampling interval"
        rows: list[tuple[str, Any]] = [
            ("connections", f"{self.active_conns} active, {self.waiting_conns} waiting, {self.total_conns} in all, "
                            f"{self.rejected_conns} rejected, {self.aborted_conns} aborted; {self.errors} error(s)"),
            ("carried", f"{_d.nbytes(self.bytes_to_wan)} to the WAN, {_d.nbytes(self.bytes_from_wan)} from it"),
            ("rate now (bytes/s)", f"{_d.bytes_rate(self.rate_to_wan_Bps)} to the WAN, {_d.bytes_rate(self.rate_from_wan_Bps)} "
                                   f"from it, over the last {interval}"),
        ]
        if self.rates:
            rows.append(("mean rate (bytes/s)", f"{_d.bytes_rate(self.rates.to_wan.life.mean_Bps)} to the WAN, "
                                                f"{_d.bytes_rate(self.rates.from_wan.life.mean_Bps)} from it, over the stream's life"))
        if self.peer:
            rows.append(("peer gateway", self.peer))
        for kind, le in sorted((self.last_errors or {}).items(), key=lambda kv: kv[1].time, reverse=True):
            rows.append((f"last {kind}", f"{le.reason} ({_d.when(le.time)})"))
        return rows

    def _repr_html_(self) -> str:
        return _d.table("Stats", self._rows(), _d.UNITS)


@dataclasses.dataclass(kw_only=True, repr=False)
class Stream:
    """The public view of one stream on one gateway.

    state: requested -> listening -> wired -> connected -> released |
    expired | failed. A stream is wired once both gateways know each other,
    and connected on a gateway once a data leg has worked there (a wrong
    peer listener keeps it wired, the failure in stats.last_errors).
    rate, rate_requested and min_rate are bits per second (reserved);
    stats' rates are bytes per second (sampled)."""

    uid: str
    role: str
    state: str
    owner: str
    listeners: list[str]
    targets: list[str]
    num_conn: int
    wan: str
    engine: str
    created: _dt.datetime
    updated: _dt.datetime
    allow: Optional[list[str]] = None
    max_active_conns: Optional[int] = None
    rate: Optional[int] = None
    rate_requested: Optional[int] = None
    min_rate: Optional[int] = None
    lease_s: Optional[int] = None
    expires: Optional[_dt.datetime] = None
    engine_note: Optional[str] = None
    reason: Optional[str] = None
    wan_server_name: Optional[str] = None
    peer_server_name: Optional[str] = None
    wan_pool: Optional[int] = None
    # The congestion control this gateway's ends of the stream's TCP WAN
    # legs run (s2cs --wan_cc); None for QUIC legs and older gateways.
    wan_cc: Optional[str] = None
    wan_cert: Optional[str] = dataclasses.field(default=None, repr=False)
    wan_cert_sha256: Optional[str] = None
    peer_cert_sha256: Optional[str] = None
    app_wait_s: Optional[int] = None
    resume_window_s: Optional[int] = None
    # An outbound stream's request's stripe (None: one leg); what the
    # peer granted is stats.stripe_legs.
    stripe: Optional[int] = None
    nodes: Optional[list[str]] = None
    channels: Optional[list[Channel]] = None
    # The stream secret: never printed (repr=False), kept out of to_json's
    # public views by the caller.
    secret: Optional[str] = dataclasses.field(default=None, repr=False)
    stats: Optional[Stats] = None

    @property
    def terminal(self) -> bool:
        """Whether the stream has ended (released, expired or failed)."""
        return self.state in ("released", "expired", "failed")

    @property
    def attached(self) -> bool:
        """Whether both gateways know each other: wired (no data has passed
        on this gateway yet) or connected (a data leg has worked here)."""
        return self.state in ("wired", "connected")

    def __repr__(self) -> str:  # never the secret nor the certificate
        st = self.stats
        last = st.latest_error() if st else None
        listeners: Any = [_d.short(x) for x in self.listeners] if len(self.listeners) <= 2 else len(self.listeners)
        return _d.one_line("Stream", [
            ("uid", self.uid), ("role", self.role), ("state", self.state), ("reason", self.reason),
            ("listeners", listeners), ("rate", _d.bits_rate(self.rate)),
            ("active_conns", st.active_conns if st else None),
            ("bytes_to_wan", st.bytes_to_wan if st else None), ("bytes_from_wan", st.bytes_from_wan if st else None),
            ("last_error", f"{last[0]}: {last[1].reason}" if last else None)])

    def _rows(self) -> list[tuple[str, Any]]:
        """The rows of its HTML table: (label, text); never the secret."""
        rate = _d.bits_rate(self.rate)
        if self.rate and self.rate_requested and self.rate_requested != self.rate:
            rate += f" (asked {_d.bits_rate(self.rate_requested)})"
        if self.min_rate:
            rate += f", at least {_d.bits_rate(self.min_rate)}"
        rows: list[tuple[str, Any]] = [
            ("uid", self.uid), ("role", self.role),
            ("state", self.state + (f": {self.reason}" if self.reason else "")),
            ("owner", self.owner), ("listeners", ", ".join(self.listeners)), ("targets", ", ".join(self.targets)),
            ("channels", self.num_conn), ("WAN", f"{self.wan}, engine {self.engine}"),
            ("reserved rate (bits/s)", rate),
            ("expires", _d.when(self.expires)),
        ]
        if self.stats:
            rows += self.stats._rows()
        return rows

    def _repr_html_(self) -> str:
        return _d.table(f"Stream {self.uid} ({self.role}, {self.state})", self._rows(), _d.UNITS)


@dataclasses.dataclass(kw_only=True)
class StreamList:
    """The body of GET /v1/streams."""

    streams: list[Stream]


@dataclasses.dataclass(kw_only=True)
class NodeInfo:
    """A node of a facility: its name and the host it serves on."""

    name: str
    host: str


@dataclasses.dataclass(kw_only=True, repr=False)
class Info:
    """Describes a gateway and the caller's identity on it. Its rates
    (capacity_rate, reserved_rate, quota_rate) are bits per second."""

    version: str
    listener_ip: str
    port_range: str
    engines: list[str]
    default_engine: str
    wan: list[str]
    wan_cert_sha256: str
    identity: str
    app_wait_default_s: int
    app_wait_max_s: int
    resume_window_default_s: int
    resume_window_max_s: int
    pool_policy: str
    pool_max_per_peer: int
    pool_max_warm: int
    capacity_rate: int
    reserved_rate: int
    capacity_streams: int
    capacity_conns: int
    quota_rate: int
    lease_default_s: int
    lease_max_s: int
    wan_port: Optional[str] = None
    wan_domain: Optional[str] = None
    # The congestion control of the gateway's TCP WAN legs (s2cs
    # --wan_cc), and whether the gateway sets it on each leg (else it is
    # the host's default).
    wan_cc: Optional[str] = None
    wan_cc_set: Optional[bool] = None
    # The most WAN legs at once the gateway carries one connection on.
    max_stripe: Optional[int] = None
    roles: Optional[list[str]] = None
    facility: Optional[str] = None
    node: Optional[str] = None
    nodes: Optional[list[NodeInfo]] = None

    def __repr__(self) -> str:
        return _d.one_line("Info", [
            ("version", self.version), ("identity", self.identity), ("listener_ip", self.listener_ip),
            ("wan", [_d.short(x) for x in self.wan[:8]]), ("engines", [_d.short(x) for x in self.engines[:8]]),
            ("capacity_rate", _d.bits_rate(self.capacity_rate)), ("reserved_rate", format_rate(self.reserved_rate)),
            ("facility", self.facility)])

    def _repr_html_(self) -> str:
        return _d.table(f"Gateway {self.listener_ip} (s2cs {self.version})", [
            ("identity", self.identity + (f" ({', '.join(self.roles)})" if self.roles else "")),
            ("facility", self.facility), ("node", self.node), ("port range", self.port_range),
            ("WAN", ", ".join(self.wan)), ("engines", f"{', '.join(self.engines)} (default {self.default_engine})"),
            ("capacity (bits/s)", f"{_d.bits_rate(self.capacity_rate)}, {format_rate(self.reserved_rate)} reserved"),
            ("streams, connections", f"{self.capacity_streams} streams, {self.capacity_conns} connections at most"),
            ("lease", f"{self.lease_default_s} s by default, {self.lease_max_s} s at most"),
        ], "Rates are bits per second.")


@dataclasses.dataclass(kw_only=True)
class GatewayHealth:
    """A gateway's health: ready, and its streams, ports, files and
    connections counted."""

    ready: bool
    streams: dict[str, int]
    ports_in_use: int
    ports_capacity: int
    conn_files_in_use: int
    conn_files_capacity: int
    wan_conns: dict[str, int]
    pooled_legs: dict[str, int]
    api_errors: dict[str, int]
    refused: dict[str, int]
    parked_conns: int
    resume_buffer_bytes: int
    resume_buffer_peak_bytes: int
    resume_buffer_capacity_bytes: int


@dataclasses.dataclass(kw_only=True, repr=False)
class GatewayStatus:
    """The body of GET /v1/status: every identity's live streams for a
    reader or an operator (scope "all"), the caller's own for anyone else
    (scope "own")."""

    version: str
    listener_ip: str
    now: _dt.datetime
    started: _dt.datetime
    health: GatewayHealth
    identity: str
    scope: str
    streams: list[Stream]

    def __repr__(self) -> str:
        return _d.one_line("GatewayStatus", [
            ("version", self.version), ("listener_ip", self.listener_ip), ("identity", self.identity),
            ("scope", self.scope), ("ready", self.health.ready), ("streams", len(self.streams))])

    def _repr_html_(self) -> str:
        rows: list[tuple[str, Any]] = [("identity", f"{self.identity} (scope {self.scope})"),
                                       ("ready", self.health.ready), ("started", _d.when(self.started)),
                                       ("ports", f"{self.health.ports_in_use} of {self.health.ports_capacity} in use")]
        for s in self.streams:
            st = s.stats
            rows.append((s.uid, f"{s.owner}, {s.role}, {s.state}, reserved {_d.bits_rate(s.rate)}"
                         + (f", now {_d.bytes_rate(st.rate_to_wan_Bps)} to the WAN" if st else "")))
        return _d.table(f"Gateway {self.listener_ip} (s2cs {self.version})", rows, _d.UNITS)


@dataclasses.dataclass(kw_only=True)
class Health:
    """The body of GET /healthz: "ok", or "starting"."""

    status: str


# ---- decoding and encoding -------------------------------------------------

_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$")


def parse_time(s: str) -> _dt.datetime:
    """An RFC 3339 time as Go writes it (nanoseconds, Z), timezone-aware."""
    m = _TIME.match(s)
    if not m:
        raise ValueError(f"{s!r} is not an RFC 3339 time")
    date, clock, frac, zone = m.groups()
    frac = ((frac or "") + "000000")[:6]
    zone = "+00:00" if zone in ("Z", "z") else zone
    return _dt.datetime.fromisoformat(f"{date}T{clock}.{frac}{zone}")


def format_time(t: _dt.datetime) -> str:
    """t as RFC 3339, UTC written Z."""
    return t.isoformat().replace("+00:00", "Z")


_hints_cache: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    h = _hints_cache.get(cls)
    if h is None:
        h = typing.get_type_hints(cls)
        _hints_cache[cls] = h
    return h


def _strip_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _decode(tp: Any, v: Any) -> Any:
    inner = _strip_optional(tp)
    if v is None:
        if inner is tp:  # not Optional: null is no value of it
            raise ValueError("want a value, got null")
        return None
    tp = inner
    origin = typing.get_origin(tp)
    if origin is list:
        (item,) = typing.get_args(tp)
        if not isinstance(v, list):
            raise ValueError(f"want a list, got {type(v).__name__}")
        return [_decode(item, x) for x in v]
    if origin is dict:
        _, val = typing.get_args(tp)
        if not isinstance(v, dict):
            raise ValueError(f"want an object, got {type(v).__name__}")
        return {str(k): _decode(val, x) for k, x in v.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_json(tp, v)
    if tp is _dt.datetime:
        if not isinstance(v, str):
            raise ValueError("want a time")
        return parse_time(v)
    if tp is float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"want a number, got {type(v).__name__}")
        return float(v)
    if tp is int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"want an integer, got {type(v).__name__}")
        return v
    if tp is bool or tp is str:
        if not isinstance(v, tp):
            raise ValueError(f"want {tp.__name__}, got {type(v).__name__}")
        return v
    return v


T = typing.TypeVar("T")


def from_json(cls: type[T], data: Any) -> T:
    """Decodes a JSON object into model cls; a field it does not have is
    ignored, a required field missing or a value of the wrong type is a
    ValueError naming the field."""
    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__}: want a JSON object, got {type(data).__name__}")
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            continue
        try:
            kw[f.name] = _decode(_hints(cls)[f.name], data[f.name])
        except ValueError as e:
            raise ValueError(f"{cls.__name__}.{f.name}: {e}") from None
    try:
        return cls(**kw)
    except TypeError as e:
        raise ValueError(f"{cls.__name__}: {e}") from None


def _encode(v: Any) -> Any:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return to_json(v)
    if isinstance(v, list):
        return [_encode(x) for x in v]
    if isinstance(v, dict):
        return {k: _encode(x) for k, x in v.items()}
    if isinstance(v, _dt.datetime):
        return format_time(v)
    return v


def to_json(obj: Any) -> dict[str, Any]:
    """The JSON object of a model, without its None (absent) fields."""
    return {f.name: _encode(getattr(obj, f.name)) for f in dataclasses.fields(obj) if getattr(obj, f.name) is not None}
