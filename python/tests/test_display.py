"""What a notebook and a print show of the models: one short line (the UID,
role, state and key numbers, never a secret), a small HTML table whose
every text from the gateway is escaped (an answer cannot put markup or
script into the notebook), and the unit of every rate: bits per second
reserved, bytes per second sampled over the gateway's interval."""

from __future__ import annotations

import datetime as dt
import html.parser
import os
import socket
import uuid
from typing import Any

import scistream
from scistream import models
from scistream.wiring import RateSample, Released, StreamStatus

from conftest import Echo, Pair, roundtrip, wait_for

MARK = "S3CRET-" + uuid.uuid4().hex
HOSTILE = ["<script>alert(1)</script>", "<img src=x onerror=alert(2)>", '"><svg onload=alert(3)>', "</td></tr></table><b>x",
           "\x1b]0;pwned\x07", "\u202eevil"]


def stream_json(**over: Any) -> dict[str, Any]:
    now = "2024-05-01T10:00:00.123456789Z"
    d: dict[str, Any] = {
        "uid": str(uuid.uuid4()), "role": "inbound", "state": "wired", "owner": HOSTILE[2], "listeners": ["127.0.0.1:20001"],
        "targets": ["127.0.0.1:6000"], "num_conn": 1, "wan": "tls", "engine": "splice", "created": now, "updated": now,
        "rate": 50_000_000, "reason": HOSTILE[0], "secret": MARK, "wan_cert": "-----BEGIN CERTIFICATE-----" + MARK,
        "stats": {"active_conns": 1, "waiting_conns": 0, "total_conns": 3, "rejected_conns": 0, "over_cap_conns": 0,
                  "aborted_conns": 2, "errors": 2, "bytes_to_wan": 8_388_608, "bytes_from_wan": 0,
                  "rate_to_wan_Bps": 7_200_000.0, "rate_from_wan_Bps": 0.0, "peer": HOSTILE[3],
                  "last_errors": {HOSTILE[1]: {"reason": HOSTILE[4] + HOSTILE[5] + "application 127.0.0.1:6000 not reachable",
                                               "time": now},
                                  "app_unreachable": {"reason": "x" * 5000, "time": "2024-05-01T09:59:00Z"}}},
    }
    d.update(over)
    return d


class Tags(html.parser.HTMLParser):
    """The tags and attributes an HTML text holds, as a browser parses it."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attrs: set[str] = set()
        self.text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs.update(a for a, _ in attrs)

    def handle_endtag(self, tag: str) -> None:
        self.tags.add(tag)

    def handle_data(self, data: str) -> None:
        self.text += data


def parsed(text: str) -> Tags:
    t = Tags()
    t.feed(text)
    t.close()
    return t


def check_html(text: str) -> Tags:
    """Only the table's own tags and attributes; every hostile text shown
    as text, with no control or bidi character."""
    t = parsed(text)
    assert t.tags <= {"table", "caption", "b", "tr", "th", "td", "small"}, t.tags
    assert t.attrs <= {"class", "style", "colspan"}, t.attrs
    assert "\x1b" not in t.text and "\u202e" not in t.text and "\x07" not in t.text
    assert MARK not in text
    return t


def test_stream_repr_is_one_short_line_without_a_secret() -> None:
    s = models.from_json(models.Stream, stream_json())
    r = repr(s)
    assert "\n" not in r and len(r) < 600, r
    assert r.startswith(f"Stream(uid='{s.uid}', role='inbound', state='wired'"), r
    assert "rate='50 Mbit/s'" in r and "bytes_to_wan=8388608" in r and "active_conns=1" in r, r
    assert MARK not in r and MARK not in str(s)
    assert "\x1b" not in r and "\u202e" not in r  # repr escapes what is not printable
    assert "last_error=" in r and "not reachable" not in r[:0]


def test_stream_html_escapes_the_gateway_s_text() -> None:
    s = models.from_json(models.Stream, stream_json())
    text = s._repr_html_()
    t = check_html(text)
    for h in HOSTILE[:4]:
        assert h in t.text, h  # shown, as text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "\\x1b]0;pwned\\a\\u202eevil" in t.text  # escaped as s2uc prints it
    assert "application 127.0.0.1:6000 not reachable" in t.text
    # Units: reserved in bits, sampled in bytes over the interval, and why a sample may exceed.
    assert "50 Mbit/s" in t.text and "7.2 MB/s" in t.text
    assert "bits per second" in t.text and "bytes per second" in t.text and "sampling interval" in t.text


def test_stats_info_gateway_status_rate_sample() -> None:
    s = models.from_json(models.Stream, stream_json())
    assert s.stats is not None
    for obj in (s.stats, s, StreamStatus(inbound=s, outbound=s)):
        r = repr(obj)
        assert "\n" not in r and len(r) < 600 and MARK not in r, r
        check_html(obj._repr_html_())
    sample = RateSample(0.0, 7_200_000.0, 0.0, 8_388_608, 0, 1, s.stats)
    assert repr(sample) == ("RateSample(to_listener='7.2 MB/s', to_connector='0 B/s', bytes_to_listener=8388608, "
                            "bytes_to_connector=0, active_conns=1)")
    assert "bytes per second" in parsed(sample._repr_html_()).text
    st = StreamStatus(inbound=s, outbound=models.from_json(models.Stream, stream_json(role="outbound", reason=None)))
    errs = st.errors()
    assert len(errs) == 4 and errs[0].startswith("inbound gateway: ") and "not reachable" in errs[0], errs
    assert all("\x1b" not in e and "\u202e" not in e for e in errs)
    assert repr(st).startswith(f"StreamStatus(uid='{s.uid}', inbound='wired', outbound='wired', last_error=")
    info = models.Info(version="1.0", listener_ip="10.0.0.5", port_range="5100-5199", engines=["splice"],
                       default_engine="splice", wan=["tls"], wan_cert_sha256="ab", identity=HOSTILE[0],
                       app_wait_default_s=30, app_wait_max_s=600, resume_window_default_s=30, resume_window_max_s=600, pool_policy="p", pool_max_per_peer=1, pool_max_warm=1,
                       capacity_rate=10**11, reserved_rate=2 * 10**9, capacity_streams=10, capacity_conns=10, quota_rate=0,
                       lease_default_s=1, lease_max_s=1)
    assert "\n" not in repr(info) and "capacity_rate='100 Gbit/s'" in repr(info)
    check_html(info._repr_html_())
    now = dt.datetime.now(dt.timezone.utc)
    health = models.GatewayHealth(ready=True, streams={}, ports_in_use=1, ports_capacity=100, conn_files_in_use=0,
                                  conn_files_capacity=1, wan_conns={}, pooled_legs={}, api_errors={}, refused={},
                                  parked_conns=0, resume_buffer_bytes=0, resume_buffer_peak_bytes=0,
                                  resume_buffer_capacity_bytes=1 << 30)
    gs = models.GatewayStatus(version="1", listener_ip="10.0.0.5", now=now, started=now, health=health, identity="alice",
                              scope="all", streams=[s] * 300)
    assert "\n" not in repr(gs) and "streams=300" in repr(gs) and len(repr(gs)) < 200
    check_html(gs._repr_html_())
    r = Released(s.uid, [], already_released=True)
    assert str(r) == f"stream {s.uid} already released" and r == [] and "already_released=True" in repr(r)


def test_a_real_stream_s_status_says_why_data_does_not_flow(pair: Pair, echo: Echo) -> None:
    """A stream whose application does not listen: its status says so, in
    the gateway's words, in one line, in errors() and in its table; the
    same stream to a listening application prints short."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with scistream.stream(target=("127.0.0.1", port), app_wait="1s", rate="50M", **pair.stream_kw()) as s:
        with socket.create_connection(s.listener, timeout=30) as c:
            c.sendall(b"hello")
            st = wait_for(lambda: (lambda v: v if v.errors() else None)(s.status()), 30, "the gateways' reason")
        assert any(f"application 127.0.0.1:{port} not reachable" in e for e in st.errors()), st.errors()
        assert "\n" not in repr(st) and "not reachable" in repr(st) and len(repr(st)) < 400, repr(st)
        t = check_html(st._repr_html_())
        assert "not reachable" in t.text and "inbound gateway" in t.text and "50 Mbit/s" in t.text
    with scistream.stream(target=("127.0.0.1", echo.port), rate="50M", **pair.stream_kw()) as s:
        data = os.urandom(1 << 20)
        assert roundtrip(s.listener, data) == data
        st = s.status()
        assert st.inbound.state == "connected" and st.errors() == []
        r = repr(st)
        assert "\n" not in r and len(r) < 300 and s.inbound.secret not in r, r  # was ~3,000 characters
        for v in (st.inbound, st.outbound):
            assert "\n" not in repr(v) and len(repr(v)) < 400, repr(v)
        check_html(st._repr_html_())
