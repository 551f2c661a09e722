"""The API as it is meant to be used: mypy --strict finds nothing here
(tests/test_typing.py)."""

from __future__ import annotations

import datetime as dt

import scistream


def wire() -> None:
    with scistream.stream(inbound="10.0.0.5:5000", outbound="10.1.0.7:5000", target=("10.0.0.20", 8080), num_conn=2,
                          rate="2G", min_rate=10**9, lease=dt.timedelta(hours=2), allow=["10.1.0.0/16"],
                          app_wait="30s", resume_window=dt.timedelta(minutes=2), server_cert="sha256:" + "0" * 64, timeout=5.0) as s:
        st: scistream.StreamStatus = s.status()
        errors: list[str] = st.errors()
        for r in s.rates(interval=0.5, count=3):
            mbps: float = r.to_listener_Bps / 1e6
            print(mbps, errors)
        s.update(rate="1G", lease="1h")
        done: scistream.Released = s.release()
        print(done.already_released)


def one_gateway() -> None:
    with scistream.Client("10.0.0.5:5000", server_cert="gw.crt", token_file="tok", side="inbound") as c:
        made = c.inbound(remote_ip="10.0.0.20", receiver_ports=[8080], num_conn=1, rate="2G", resume_window_s=60)
        c.update(made.uid, rate=0, allow=["10.0.0.0/8"])
        c.list(all=True, owner="alice")
        gone: scistream.Stream = c.release(made.uid)
        print(gone.state)


async def asynchronous() -> None:
    async with scistream.AsyncClient("10.0.0.5:5000", timeout=5.0) as c:
        s = await c.inbound(remote_ip="10.0.0.20", receiver_ports=[8080], num_conn=1)
        await c.release(s.uid, owner="alice")
    async with scistream.astream(target=("10.0.0.20", [8080, 8081]), num_conn=2, resume_window=0) as w:
        async for r in w.rates(interval=1.0):
            print(r.bytes)
