"""Every route of the control API, called through Client and AsyncClient on
real gateways, and every error code raised as its class from a real
gateway's answer (where a gateway can be made to give it)."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest
import yaml

import scistream
from scistream import errors
from scistream.models import OutboundRequest

from conftest import REPO, Gateway, Pair, start_gateway, wait_for
from test_trust import certs, fake  # noqa: F401 (fixtures)

CODES = yaml.safe_load((REPO / "internal/api/openapi.yaml").read_text())["components"]["schemas"]["Code"]["enum"]


def wire_by_hand(pair: Pair, port: int, who: str = "alice", **inbound: Any) -> tuple[scistream.Stream, scistream.Stream, scistream.Stream]:
    """inbound, outbound and attach, route by route."""
    with pair.client(pair.cons, who) as ci, pair.client(pair.prod, who) as co:
        created = ci.inbound(remote_ip="127.0.0.1", receiver_ports=[port], num_conn=1, **inbound)
        assert created.state == "listening" and created.secret and created.wan_cert
        outs = co.outbound(OutboundRequest(uid=created.uid, peer_listeners=created.listeners, num_conn=1,
                                           secret=created.secret, peer_cert=created.wan_cert, wan=created.wan))
        assert outs.state == "wired" and outs.attached  # no data has passed yet
        ins = ci.attach(created.uid, peer_cert=outs.wan_cert)
        assert ins.state == "wired" and ins.attached and ins.peer_cert_sha256 == outs.wan_cert_sha256
        return created, outs, ins


def test_every_route_sync(pair: Pair, echo: Any) -> None:
    with pair.client(pair.cons) as ci, pair.client(pair.prod) as co, pair.client(pair.cons, "reader") as reader, \
            pair.client(pair.cons, "oper") as oper:
        assert ci.health().status == "ok"
        assert ci.openapi()["openapi"].startswith("3.")
        info = ci.info()
        assert info.identity == "alice" and info.roles == ["user"] and info.listener_ip == pair.cons.ip
        assert info.wan_cert_sha256 == pair.cons.fingerprint

        created, outs, ins = wire_by_hand(pair, echo.port)
        uid = created.uid
        got = ci.get(uid)
        assert got.uid == uid and got.state == "wired" and got.stats is not None and got.secret is None
        assert uid in [s.uid for s in ci.list()]
        assert uid in [s.uid for s in oper.list(owner="alice")]
        assert uid in [s.uid for s in oper.list(all_owners=True)]
        assert oper.get(uid, owner="alice").owner == "alice"

        up = co.update(uid, rate="1G", lease_s=3600, allow=["127.0.0.1/32"])
        assert up.rate == 1_000_000_000 and up.lease_s == 3600 and up.allow == ["127.0.0.1/32"]
        assert ci.update(uid, rate=0).rate is None  # best effort

        st = reader.gateway_status()
        assert st.health.ready and st.scope == "all" and uid in [s.uid for s in st.streams]
        own = ci.gateway_status()
        assert own.identity == "alice" and own.scope == "own" and {s.owner for s in own.streams} == {"alice"}
        assert "scistream" in reader.metrics()
        assert "<html" in ci.status_page().lower()

        assert co.release(uid).state == "released"
        rel = ci.release(uid)
        assert rel.state == "released" and rel.stats is not None
        assert ci.release(uid).state == "released"  # again: a no-op that reports it
        assert uid not in [s.uid for s in ci.list()]
        assert uid in [s.uid for s in ci.list(all=True)]


def test_every_route_async(pair: Pair, echo: Any) -> None:
    async def run() -> None:
        kw = dict(server_cert=pair.cons.cert, token=pair.tokens["bob"])
        async with scistream.AsyncClient(pair.cons.addr, **kw) as ci, \
                scistream.AsyncClient(pair.prod.addr, server_cert=pair.prod.cert, token=pair.tokens["bob"]) as co, \
                scistream.AsyncClient(pair.cons.addr, server_cert=pair.cons.cert, token=pair.tokens["reader"]) as reader:
            assert (await ci.health()).status == "ok"
            assert "paths" in await ci.openapi()
            assert (await ci.info()).identity == "bob"
            created = await ci.inbound(remote_ip="127.0.0.1", receiver_ports=[echo.port], num_conn=1)
            outs = await co.outbound(dict(uid=created.uid, peer_listeners=created.listeners, num_conn=1,
                                          secret=created.secret, peer_cert=created.wan_cert))
            ins = await ci.attach(created.uid, peer_cert=outs.wan_cert)
            assert ins.state == "wired"
            assert (await ci.get(created.uid)).uid == created.uid
            assert created.uid in [s.uid for s in await ci.list()]
            assert (await co.update(created.uid, lease_s=600)).lease_s == 600
            assert created.uid in [s.uid for s in (await reader.gateway_status()).streams]
            assert "scistream" in await reader.metrics()
            assert "<html" in (await ci.status_page()).lower()
            assert (await co.release(created.uid)).state == "released"
            assert (await ci.release(created.uid)).state == "released"
            with pytest.raises(scistream.NotFound):
                await ci.get(str(uuid.uuid4()))
    asyncio.run(run())


# ---- every error code ------------------------------------------------------


@pytest.fixture(scope="module")
def unavailable_gw(bins: Path, tmp_path_factory: pytest.TempPathFactory, pair: Pair) -> Iterator[Gateway]:
    """A gateway whose identity provider cannot be asked: an opaque token
    not in its token file goes to an introspection endpoint nobody serves
    (a port closed on loopback), so the request is unavailable."""
    d = tmp_path_factory.mktemp("gw-unavail")
    secret = d / "isecret"
    secret.write_text("s")
    secret.chmod(0o600)
    gw = start_gateway(str(bins / "s2cs"), d, pair.tokens_file,
                       ["--introspection_url", "https://127.0.0.1:1/introspect", "--introspection_client_id", "gw",
                        "--introspection_secret_file", str(secret)])
    yield gw
    gw.stop()


def _provoke_invalid_argument(pair: Pair, c: scistream.Client, echo: Any, **_: Any) -> None:
    c.inbound(remote_ip="127.0.0.1", receiver_ports=[echo.port], num_conn=0)


def _provoke_unauthenticated(pair: Pair, c: scistream.Client, **_: Any) -> None:
    with scistream.Client(pair.cons.addr, server_cert=pair.cons.cert, token=secrets.token_hex(24)) as stranger:
        stranger.info()


def _provoke_permission_denied(pair: Pair, c: scistream.Client, **_: Any) -> None:
    c.get(str(uuid.uuid4()), owner="bob")  # alice is no operator


def _provoke_not_found(pair: Pair, c: scistream.Client, **_: Any) -> None:
    c.get(str(uuid.uuid4()))


def _provoke_conflict(pair: Pair, c: scistream.Client, echo: Any, **_: Any) -> None:
    s = c.inbound(remote_ip="127.0.0.1", receiver_ports=[echo.port], num_conn=1)
    try:
        c.inbound(uid=s.uid, remote_ip="127.0.0.1", receiver_ports=[echo.port], num_conn=1)
    finally:
        c.release(s.uid)


def _provoke_no_resources(pair: Pair, c: scistream.Client, echo: Any, **_: Any) -> None:
    c.inbound(remote_ip="127.0.0.1", receiver_ports=[echo.port], num_conn=1, rate="200G")  # capacity is 100G


def _provoke_unavailable(pair: Pair, c: scistream.Client, unavailable: Callable[[], Gateway], **_: Any) -> None:
    gw = unavailable()
    with scistream.Client(gw.addr, server_cert=gw.cert, token="opaque-" + secrets.token_hex(16)) as stranger:
        stranger.info()


# The way to make a real gateway answer each code. internal (a server fault)
# cannot be provoked from outside: a fake gateway answers it (below), and
# test_codes_are_the_enum checks its class against the document. A code
# added to openapi.yaml fails here until it has a way.
PROVOKE: dict[str, Optional[Callable[..., None]]] = {
    "invalid_argument": _provoke_invalid_argument,
    "unauthenticated": _provoke_unauthenticated,
    "permission_denied": _provoke_permission_denied,
    "not_found": _provoke_not_found,
    "conflict": _provoke_conflict,
    "no_resources": _provoke_no_resources,
    "unavailable": _provoke_unavailable,
    "internal": None,
}


def test_every_code_has_a_way() -> None:
    assert set(PROVOKE) == set(CODES)


@pytest.mark.parametrize("code", CODES)
def test_error_code_from_a_real_gateway(code: str, pair: Pair, echo: Any, request: pytest.FixtureRequest) -> None:
    provoke = PROVOKE[code]
    cls = errors.CODES[code]
    if provoke is None:
        # No outside request makes a real gateway answer it: a fake one
        # does, as a gateway would, and the client raises its class with
        # the request id the gateway kept.
        fake = request.getfixturevalue("fake")
        g = fake(lambda m, p, b: (500, {"error": {"code": code, "message": "a server fault; see the gateway's log"}}))
        with scistream.Client(g.addr, server_cert=str(request.getfixturevalue("certs")["fake"][0]), token="t") as c:
            with pytest.raises(cls) as ei:
                c.info()
        assert ei.value.code == code and ei.value.status == 500
        assert ei.value.request_id and ei.value.request_id == g.requests[0][2]["X-Request-Id"]
        return
    with pair.client(pair.cons) as c:
        with pytest.raises(cls) as ei:
            provoke(pair, c, echo=echo, unavailable=lambda: request.getfixturevalue("unavailable_gw"))
    e = ei.value
    assert type(e) is cls and e.code == code and e.message
    assert e.status == {"invalid_argument": 400, "unauthenticated": 401, "permission_denied": 403, "not_found": 404,
                        "conflict": 409, "no_resources": 507, "unavailable": 503}[code]
    # The request id is the one the gateway logged the request under.
    assert e.request_id and e.request_id in str(e)
    logs = [pair.cons.log] + ([request.getfixturevalue("unavailable_gw").log] if code == "unavailable" else [])
    wait_for(lambda: any(e.request_id in p.read_text() for p in logs), 10, f"request id {e.request_id} in the gateway's log")
