"""scistream.stream and astream against two real gateways: data carried
byte-exact, both sides released on a normal exit, an exception, a real
SIGINT and a cancelled task, a failed wiring rolled back, the stream seen and
released by s2uc, 20 streams from threads at once, live rates."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import scistream

from conftest import Echo, Pair, roundtrip, wait_for


def live_uids(pair: Pair, who: str = "alice") -> tuple[set[str], set[str]]:
    with pair.client(pair.cons, who) as ci, pair.client(pair.prod, who) as co:
        return {s.uid for s in ci.list()}, {s.uid for s in co.list()}


def assert_released(pair: Pair, uid: str, who: str = "alice") -> None:
    with pair.client(pair.cons, who) as ci, pair.client(pair.prod, who) as co:
        assert ci.get(uid).state == "released"
        assert co.get(uid).state == "released"


def test_bytes_exact_on_every_channel(pair: Pair, echo: Echo, isolated_env: Path) -> None:
    with scistream.stream(target=("127.0.0.1", echo.port), num_conn=2, rate="2G", **pair.stream_kw()) as s:
        assert len(s.listeners) == 2 and s.inbound.state == "wired" and s.outbound.state == "wired"  # no data yet
        assert s.inbound.rate == s.outbound.rate == 2_000_000_000
        # The local record s2uc reads, 0600, with the secret, never a token.
        rec = isolated_env / "streams" / f"{s.uid}.json"
        assert oct(rec.stat().st_mode & 0o777) == "0o600"
        sess = json.loads(rec.read_text())
        assert sess["secret"] == s.inbound.secret and pair.tokens["alice"] not in rec.read_text()
        assert "secret" not in repr(s.inbound) or s.inbound.secret not in repr(s.inbound)
        for i, listener in enumerate(s.listeners):
            host, port = listener.rsplit(":", 1)
            data = os.urandom((4 << 20) + i)
            assert roundtrip((host, int(port)), data) == data
        st = s.status()
        assert st.inbound.stats and st.outbound.stats
        wait_for(lambda: s.status().outbound.stats.bytes_to_wan >= (8 << 20), 10, "the counters")  # type: ignore[union-attr]
        uid = s.uid
    assert_released(pair, uid)
    # As s2uc release leaves it: no side, no secret, when and by whom.
    sess = json.loads(rec.read_text())
    assert "inbound" not in sess and "outbound" not in sess and sess["secret"] == ""
    assert sess["released"]["by"] == "released by alice" and sess["released"]["at"]


def test_release_on_exception(pair: Pair, echo: Echo) -> None:
    with pytest.raises(RuntimeError, match="the workflow failed"):
        with scistream.stream(target=("127.0.0.1", echo.port), **pair.stream_kw()) as s:
            uid = s.uid
            assert uid in live_uids(pair)[0]
            raise RuntimeError("the workflow failed")
    assert_released(pair, uid)


def test_release_on_keyboard_interrupt(pair: Pair, echo: Echo, tmp_path: Path) -> None:
    """A real SIGINT to a Python process inside the with block: both sides
    are released before it exits."""
    script = tmp_path / "ctrl_c.py"
    script.write_text(textwrap.dedent(f"""
        import sys, threading, scistream
        kw = {pair.stream_kw()!r}
        with scistream.stream(target=("127.0.0.1", {echo.port}), **kw) as s:
            print(s.uid, flush=True)
            threading.Event().wait()   # until Ctrl-C
    """))
    env = {**os.environ, "SCISTREAM_HOME": str(tmp_path / "home")}
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        assert p.stdout
        uid = p.stdout.readline().strip()
        assert uid, p.stderr.read() if p.stderr else ""
        assert uid in live_uids(pair)[1]
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert "KeyboardInterrupt" in err and p.returncode != 0
    assert_released(pair, uid)
    assert json.loads((tmp_path / "home" / "streams" / f"{uid}.json").read_text())["released"]


def test_failed_wiring_rolls_back(pair: Pair, echo: Echo) -> None:
    """The outbound gateway refuses (an allow entry that is no prefix): the
    error keeps its class and the inbound side created before is released."""
    before = live_uids(pair)[0]
    with pytest.raises(scistream.InvalidArgument):
        with scistream.stream(target=("127.0.0.1", echo.port), allow=["not-a-prefix"], **pair.stream_kw()):
            pytest.fail("wired")
    assert live_uids(pair)[0] == before


def test_s2uc_sees_and_releases_a_python_stream(pair: Pair, echo: Echo, isolated_env: Path) -> None:
    s2uc = str(pair.bins / "s2uc")
    env = {**os.environ, "SCISTREAM_HOME": str(isolated_env)}
    with scistream.stream(target=("127.0.0.1", echo.port), num_conn=2, **pair.stream_kw()) as s:
        out = subprocess.run([s2uc, "status", s.uid, "--output", "json"], env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        views = json.loads(out.stdout)["gateways"]
        assert {v["role"] for v in views} == {"inbound", "outbound"} and all(v["state"] == "wired" for v in views)
        data = os.urandom(1 << 20)
        assert roundtrip(s.listener, data) == data
        st = s.status()
        assert st.inbound.state == st.outbound.state == "connected"  # data passed on both
        rel = subprocess.run([s2uc, "release", s.uid], env=env, capture_output=True, text=True, timeout=60)
        assert rel.returncode == 0, rel.stderr
        assert rel.stdout.count("released") == 2
        assert_released(pair, s.uid)
        uid = s.uid
        # Python's release after s2uc's: success, said to be a release again.
        again = s.release()
        assert again.already_released and [v.state for v in again] == ["released", "released"], again
        assert str(again) == f"stream {uid} released (already released before)"
    # Leaving the block after s2uc released it: nothing left, no error.
    assert_released(pair, uid)


def test_release_again_is_success_said_as_such(pair: Pair, echo: Echo) -> None:
    """release() twice, as a retried cleanup does: the second is no error
    and says "already released" (Released.already_released), as s2uc
    release does; the first said what it released."""
    s = scistream.stream(target=("127.0.0.1", echo.port), **pair.stream_kw())
    with s:
        uid = s.uid
        first = s.release()
        assert not first.already_released and s.released
        assert [(v.role, v.state) for v in first] == [("outbound", "released"), ("inbound", "released")], first
        assert str(first) == f"stream {uid} released"
        again = s.release()
        assert again.already_released and again == [] and str(again) == f"stream {uid} already released", repr(again)
    assert s.release().already_released  # after the block too
    assert_released(pair, uid or "")

    async def run() -> None:
        async with scistream.astream(target=("127.0.0.1", echo.port), **pair.stream_kw()) as a:
            assert not (await a.release()).already_released
            assert (await a.release()).already_released
    asyncio.run(run())


def test_a_side_not_released_is_released_by_the_next_call(pair: Pair, echo: Echo) -> None:
    """A release that fails on one side (its gateway unreachable) raises,
    keeps that side, and claims no release: the next call releases it,
    and only then is the stream "already released"."""
    with scistream.stream(target=("127.0.0.1", echo.port), **pair.stream_kw()) as s:
        uid = s.uid or ""
        real = s.inbound_client
        s.inbound_client = scistream.Client("127.0.0.1:1", token="t", timeout=5)  # nothing listens on port 1
        try:
            with pytest.raises(scistream.SciStreamError, match=r"release .* on 127\.0\.0\.1:1 \(inbound\)"):
                s.release()
            assert not s.released
            ins, outs = live_uids(pair)
            assert uid in ins and uid not in outs
        finally:
            s.inbound_client.close()
            s.inbound_client = real
        done = s.release()
        assert [v.role for v in done] == ["inbound"] and not done.already_released, repr(done)
        assert s.released and s.release().already_released
    assert_released(pair, uid)


def test_a_closed_stream_with_a_side_left_says_what_releases_it(pair: Pair, echo: Echo, isolated_env: Path) -> None:
    """Closed while a side could not be released: release() says so, and
    names the s2uc release that does it (which then does)."""
    s = scistream.stream(target=("127.0.0.1", echo.port), **pair.stream_kw()).open()
    uid = s.uid or ""
    real = s.inbound_client
    s.inbound_client = scistream.Client("127.0.0.1:1", token="t", timeout=5)
    with pytest.raises(scistream.SciStreamError, match=r"\(inbound\)"):
        s.close()
    real.close()
    with pytest.raises(scistream.SciStreamError) as e:
        s.release()
    assert str(e.value) == (f"stream {uid}: the inbound side was not released, and this stream object is closed: "
                            f"release it with s2uc release {uid}")
    assert uid in live_uids(pair)[0]
    env = {**os.environ, "SCISTREAM_HOME": str(isolated_env), "SCISTREAM_TOKEN_FILE": pair.token_file("alice")}
    rel = subprocess.run([str(pair.bins / "s2uc"), "release", uid], env=env, capture_output=True, text=True, timeout=60)
    assert rel.returncode == 0, rel.stderr
    assert_released(pair, uid)


def test_s2uc_says_a_python_release(pair: Pair, echo: Echo, isolated_env: Path) -> None:
    """A stream Python released is, to s2uc, released (when and by whom),
    not unknown: the record is left as s2uc release leaves it."""
    with scistream.stream(target=("127.0.0.1", echo.port), **pair.stream_kw()) as s:
        uid = s.uid
    env = {**os.environ, "SCISTREAM_HOME": str(isolated_env)}
    out = subprocess.run([str(pair.bins / "s2uc"), "status", uid or ""], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 4, out.stderr
    assert f"stream {uid} was released at" in out.stderr and "by alice" in out.stderr


def test_old_released_records_pruned(tmp_path: Path) -> None:
    from scistream.wiring import Sessions
    ss = Sessions(tmp_path)
    old, new, live = (str(uuid.uuid4()) for _ in range(3))
    ss.save({"uid": old, "wan": "tls", "secret": "", "released": {"at": "2020-01-01T00:00:00Z"}})
    ss.save({"uid": new, "wan": "tls", "secret": "", "released": {"at": "2099-01-01T00:00:00Z"}})
    ss.save({"uid": live, "wan": "tls", "secret": "s", "inbound": {"s2cs": "a:1", "listeners": []}})
    ss.released(live, ["a:1"], [])
    assert ss.load(old) is None and ss.load(new) is not None and ss.load(live)["released"]  # type: ignore[index]


def test_twenty_streams_from_threads(pair: Pair, echo: Echo) -> None:
    uids: dict[int, str] = {}
    errs: list[BaseException] = []
    start = threading.Barrier(20)

    def one(i: int) -> None:
        who = f"user{i:02d}"
        try:
            start.wait(30)
            with scistream.stream(target=("127.0.0.1", echo.port), **pair.stream_kw(who)) as s:
                uids[i] = s.uid or ""
                data = os.urandom(256 << 10)
                assert roundtrip(s.listener, data) == data
        except BaseException as e:  # noqa: BLE001
            errs.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errs, errs
    assert len(set(uids.values())) == 20
    for i, uid in uids.items():
        assert_released(pair, uid, f"user{i:02d}")


def test_live_rates(pair: Pair, echo: Echo) -> None:
    """rates() yields the outbound gateway's readings while data flows; the
    bytes it reports are those sent; the stream is paced to its rate."""
    data = os.urandom(4 << 20)
    with scistream.stream(target=("127.0.0.1", echo.port), rate="40M", **pair.stream_kw()) as s:
        done = threading.Event()
        got: list[bytes] = []

        took: list[float] = []

        def send() -> None:
            t0 = time.monotonic()
            got.append(roundtrip(s.listener, data))
            took.append(time.monotonic() - t0)
            done.set()

        t = threading.Thread(target=send)
        t.start()
        seen = []
        for r in s.rates(interval=0.2, count=300, progress=True):
            seen.append(r)
            if done.is_set() and r.bytes_to_listener == len(data) and r.bytes_to_connector == len(data):
                break
        t.join(60)
        assert got == [data]
        assert any(r.to_listener_Bps > 0 for r in seen), "no rate seen while the data flowed"
        assert seen[-1].bytes == 2 * len(data)
        # 40 Mbit/s is 5 MB/s each way: 4 MiB take at least ~0.8 s (several
        # of the gateway's 200 ms samples). The stream is paced: a bound on
        # the duration from below holds on a starved machine, where a bound
        # on one sample would not (bytes are counted a chunk at a time).
        assert took[0] > 0.5


def test_astream(pair: Pair, echo: Echo) -> None:
    async def run() -> str:
        async with scistream.astream(target=("127.0.0.1", echo.port), num_conn=1, rate="1G", **pair.stream_kw()) as s:
            data = os.urandom(1 << 20)
            host, port = s.listener
            r, w = await asyncio.open_connection(host, port)
            w.write(data)
            await w.drain()
            w.write_eof()
            back = await r.read()
            w.close()
            assert back == data
            st = await s.status()
            assert st.inbound.state == st.outbound.state == "connected"
            async for sample in s.rates(interval=0.2, count=2):
                assert sample.stats is not None
            return s.uid or ""
    uid = asyncio.run(run())
    assert_released(pair, uid)


def test_astream_cancelled(pair: Pair, echo: Echo) -> None:
    """A task cancelled inside the block (asyncio's Ctrl-C) releases both sides."""
    box: dict[str, str] = {}

    async def body() -> None:
        async with scistream.astream(target=("127.0.0.1", echo.port), **pair.stream_kw()) as s:
            box["uid"] = s.uid or ""
            await asyncio.Event().wait()

    async def run() -> None:
        t = asyncio.create_task(body())
        while "uid" not in box:
            await asyncio.sleep(0.01)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
    asyncio.run(run())
    assert_released(pair, box["uid"])


def test_update_both_sides_and_set_back(pair: Pair, echo: Echo) -> None:
    """update() changes both sides as s2uc update does; a raise the outbound
    gateway refuses is set back on the inbound side, so both keep one rate."""
    with scistream.stream(target=("127.0.0.1", echo.port), rate="1G", **pair.stream_kw("bob")) as s:
        st = s.update(rate="2G", lease="1h", allow=["127.0.0.1"])
        assert st.inbound.rate == st.outbound.rate == 2_000_000_000
        assert st.inbound.lease_s == st.outbound.lease_s == 3600 and st.outbound.allow == ["127.0.0.1"]
        # Fill the outbound gateway's capacity (100G) but 0.5G with another stream of its own.
        with pair.client(pair.prod, "user19") as filler:
            f = filler.inbound(remote_ip="127.0.0.1", receiver_ports=[echo.port], num_conn=1,
                               rate=100_000_000_000 - 2_000_000_000 - 500_000_000)
            try:
                with pytest.raises(scistream.NoResources):
                    s.update(rate="3G")
            finally:
                filler.release(f.uid)
        now = s.status()
        assert now.inbound.rate == now.outbound.rate == 2_000_000_000
        data = os.urandom(1 << 20)
        assert roundtrip(s.listener, data) == data


def test_stripe(pair: Pair, echo: Echo) -> None:
    """stripe= reaches the outbound side, whose connections the inbound
    gateway grants that many WAN legs at once (stats.stripe_legs), and the
    bytes come back whole; a bad value, or stripe with quic, is a
    ConfigError before any request; above the gateway's maximum the
    outbound gateway refuses, naming it."""
    with scistream.stream(target=("127.0.0.1", echo.port), stripe=3, **pair.stream_kw()) as s:
        assert s.outbound.stripe == 3 and not s.inbound.stripe, (s.inbound, s.outbound)
        data = os.urandom(4 << 20)
        assert roundtrip(s.listener, data) == data
        st = wait_for(lambda: (lambda v: v if v.outbound.stats and v.outbound.stats.stripe_legs else None)(s.status()),
                      20, "the outbound side's word on its stripes")
        assert st.outbound.stats.stripe_legs == 3  # type: ignore[union-attr]
    for bad, wan in ((0, "tls"), (17, "tls"), (True, "tls"), (2, "quic")):
        with pytest.raises(scistream.ConfigError, match="stripe"):
            scistream.stream(target=("127.0.0.1", echo.port), stripe=bad, wan=wan, **pair.stream_kw())
    before = live_uids(pair)[0]
    with pytest.raises(scistream.InvalidArgument, match="stripe 9 exceeds this gateway's maximum of 8"):
        with scistream.stream(target=("127.0.0.1", echo.port), stripe=9, **pair.stream_kw()):
            pytest.fail("wired")
    assert live_uids(pair)[0] == before
    with pair.client(pair.prod) as c:
        assert c.info().max_stripe == 8


def test_resume_window(pair: Pair, echo: Echo) -> None:
    """resume_window= reaches both sides (seconds, "2m" or a timedelta, as
    app_wait= is taken); a stream that asks for 0 does not resume, once a
    connection has passed; above the gateway's maximum the inbound gateway
    refuses, naming it, and nothing is left; a bad value is a ConfigError
    before any request. The clients' inbound() takes resume_window_s."""
    import datetime as dt
    for window, want in ((0, 0), ("2m", 120), (dt.timedelta(seconds=45), 45), (None, 30)):
        with scistream.stream(target=("127.0.0.1", echo.port), resume_window=window, **pair.stream_kw()) as s:
            assert s.inbound.resume_window_s == want and s.outbound.resume_window_s == want, (window, s.inbound, s.outbound)
            if window == 0:
                assert roundtrip(s.listener, b"hello") == b"hello"
                st = wait_for(lambda: (lambda v: v if v.inbound.stats and v.inbound.stats.resume and v.outbound.stats
                                       and v.outbound.stats.resume else None)(s.status()), 20, "a leg's word on resuming")
                assert st.inbound.stats.resume == st.outbound.stats.resume == "off"  # type: ignore[union-attr]
    before = live_uids(pair)[0]
    with pytest.raises(scistream.InvalidArgument, match="resume_window_s 660 exceeds this gateway's maximum of 600 seconds"):
        with scistream.stream(target=("127.0.0.1", echo.port), resume_window="11m", **pair.stream_kw()):
            pytest.fail("wired")
    assert live_uids(pair)[0] == before
    for bad in ("soon", -1, 1.5):
        with pytest.raises(scistream.ConfigError, match="resume_window"):
            scistream.stream(target=("127.0.0.1", echo.port), resume_window=bad, **pair.stream_kw())  # type: ignore[arg-type]
    with pair.client(pair.cons) as c:
        s = c.inbound(remote_ip="127.0.0.1", receiver_ports=[echo.port], num_conn=1, resume_window_s=7)
        try:
            assert s.resume_window_s == 7 and c.get(s.uid).resume_window_s == 7
            info = c.info()
            assert info.resume_window_default_s == 30 and info.resume_window_max_s == 600
        finally:
            c.release(s.uid)
