"""Each line marked "# error" is a mistake mypy --strict must refuse
(tests/test_typing.py checks that it reports those lines and no other)."""

from __future__ import annotations

import scistream


def wrong() -> None:
    scistream.stream(target=("10.0.0.20", 8080), numconn=2)  # error
    scistream.stream(target=("10.0.0.20", 8080), num_conn="2")  # error
    scistream.stream(target="10.0.0.20:8080")  # error
    scistream.stream(target=("10.0.0.20", 8080), rate=2.5)  # error
    scistream.stream(target=("10.0.0.20", 8080), resume_window=2.5)  # error
    scistream.astream(target=("10.0.0.20", 8080), servr_cert="gw.crt")  # error
    scistream.Client("10.0.0.5:5000", servr_cert="gw.crt")  # error
    scistream.Client("10.0.0.5:5000", "gw.crt")  # error
    scistream.AsyncClient("10.0.0.5:5000", side="both")  # error
    with scistream.Client("10.0.0.5:5000") as c:
        c.inbound(remote_ip="10.0.0.20", receiver_ports=[8080], numconn=1)  # error
        c.inbound(remote_ip="10.0.0.20", receiver_ports=[8080])  # error
        c.inbound(remote_ip="10.0.0.20", receiver_ports=[8080], num_conn=1, resume_window_s="30s")  # error
        c.get("uid", ownr="alice")  # error
        c.update("uid", rate=None)  # error
        c.update("uid", lease="2h")  # error
        c.release("uid", force=True)  # error
    w = scistream.stream(target=("10.0.0.20", 8080))
    w.update(rat="2G")  # error
    w.rates(intervall=1.0)  # error
    n: int = w.release()  # error
