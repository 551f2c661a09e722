"""The login of s2uc login, read and renewed as s2uc does (internal/login):
an expired access token is renewed with the refresh token at the issuer's
token endpoint (a local HTTPS server stands for the identity provider), under
the flock s2uc takes, and the renewed token is the one the gateway sees."""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import threading
import urllib.parse
from pathlib import Path
from typing import Any, Iterator

import pytest

import scistream
from scistream.auth import LoginError, LoginStore

from conftest import Pair, wait_for
from test_trust import FakeGateway, make_cert


class IdP:
    def __init__(self, dir: Path, access_token: str) -> None:
        self.crt, key = make_cert(dir, "idp")
        self.forms: list[dict[str, list[str]]] = []
        self.access_token = access_token

        def answer(method: str, path: str, body: Any) -> tuple[int, Any]:
            self.forms.append(urllib.parse.parse_qs(body))
            return 200, {"access_token": self.access_token, "token_type": "Bearer", "expires_in": 3600, "refresh_token": "r2"}
        self.srv = FakeGateway(self.crt, key, answer)

    @property
    def url(self) -> str:
        return f"https://{self.srv.addr}/token"


@pytest.fixture
def idp(tmp_path: Path, pair: Pair) -> Iterator[IdP]:
    i = IdP(tmp_path, pair.tokens["alice"])
    yield i
    i.srv.close()


def save_login(home: Path, idp: IdP, access: str, expiry: dt.datetime) -> Path:
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    p = home / "login.json"
    p.write_text(json.dumps({"issuer": "https://idp.example", "client_id": "s2uc", "ca_file": str(idp.crt),
                             "token_endpoint": idp.url, "access_token": access, "refresh_token": "r1",
                             "token_type": "Bearer", "expiry": expiry.isoformat().replace("+00:00", "Z")}))
    p.chmod(0o600)
    return p


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def test_expired_login_renewed_and_used(pair: Pair, idp: IdP, isolated_env: Path) -> None:
    p = save_login(isolated_env, idp, "expired-token", now() - dt.timedelta(minutes=5))
    with scistream.Client(pair.cons.addr, server_cert=pair.cons.cert) as c:
        assert c.info().identity == "alice"
        assert pair.tokens["alice"] not in repr(c)
    assert idp.forms == [{"grant_type": ["refresh_token"], "refresh_token": ["r1"], "client_id": ["s2uc"]}]
    saved = json.loads(p.read_text())
    assert saved["access_token"] == pair.tokens["alice"] and saved["refresh_token"] == "r2"
    assert scistream.models.parse_time(saved["expiry"]) > now() + dt.timedelta(minutes=50)
    assert p.stat().st_mode & 0o777 == 0o600
    # Fresh now: the next client uses it without asking the issuer.
    with scistream.Client(pair.cons.addr, server_cert=pair.cons.cert) as c:
        assert c.info().identity == "alice"
    assert len(idp.forms) == 1


def test_renewal_waits_for_s2ucs_lock(pair: Pair, idp: IdP, isolated_env: Path) -> None:
    """While another process holds login.json.lock (as s2uc does while it
    renews), the client waits; it then reads the login that one saved and
    does not renew it a second time."""
    p = save_login(isolated_env, idp, "expired-token", now() - dt.timedelta(minutes=5))
    lock = os.open(str(p) + ".lock", os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    got: list[Any] = []

    def client() -> None:
        try:
            with scistream.Client(pair.cons.addr, server_cert=pair.cons.cert) as c:
                got.append(c.info().identity)
        except BaseException as e:  # noqa: BLE001
            got.append(e)

    t = threading.Thread(target=client)
    t.start()
    try:
        ino = os.fstat(lock).st_ino

        def waiting() -> bool:  # the kernel lists the blocked flock
            return any(l.split()[1] == "->" and l.split()[6].endswith(f":{ino}") for l in open("/proc/locks") if len(l.split()) > 6)
        wait_for(waiting, 10, "the client to wait on the login's lock")
        assert not got
        # "s2uc" renewed it meanwhile: bob's token, fresh.
        save_login(isolated_env, idp, pair.tokens["bob"], now() + dt.timedelta(hours=1))
    finally:
        os.close(lock)
    t.join(30)
    assert got == ["bob"]
    assert idp.forms == []


def test_login_refusals(isolated_env: Path, idp: IdP) -> None:
    p = save_login(isolated_env, idp, "a", now() - dt.timedelta(minutes=5))
    p.chmod(0o644)
    with pytest.raises(LoginError, match="read or written by others"):
        LoginStore(p).token()
    p.chmod(0o600)
    saved = json.loads(p.read_text())
    del saved["refresh_token"]
    p.write_text(json.dumps(saved))
    with pytest.raises(LoginError, match="holds no refresh token: run s2uc login") as ei:
        LoginStore(p).token()
    assert "r1" not in str(ei.value)


def test_long_lived_client_renews_the_login(pair: Pair, idp: IdP, isolated_env: Path) -> None:
    """A client kept open in a notebook outlives its access token: each
    request reads the login, renewed when it is about to expire."""
    save_login(isolated_env, idp, pair.tokens["bob"], now() + dt.timedelta(minutes=10))
    with scistream.Client(pair.cons.addr, server_cert=pair.cons.cert) as c:
        assert c.info().identity == "bob"
        save_login(isolated_env, idp, "stale", now() - dt.timedelta(minutes=1))  # time passed
        assert c.info().identity == "alice"  # the issuer's new token
    assert len(idp.forms) == 1
