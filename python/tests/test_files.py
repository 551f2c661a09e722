"""Files that grant trust, made writable by others or owned by another user
(the tests run as root: the other user is uid 65534): the local records of
streams and their directory, a pinned server_cert, the configuration file.
Each is refused with the chmod or chown that fixes it, and the attacker who
rewrote it to name their own gateway and certificate gets no request, so
not the user's token."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

import scistream
from scistream.wiring import Sessions

from conftest import Echo, Pair
from test_trust import certs, fake  # noqa: F401 (fixtures)

OTHER = 65534  # nobody


@pytest.fixture(autouse=True)
def as_root() -> None:
    if os.getuid() != 0:
        pytest.skip("chown to another user needs root")


def token_requests(g: Any) -> list[str]:
    return [h.get("Authorization", "") for _, _, h in g.requests]


def attacker_gateway(fake: Any) -> Any:
    """The attacker's gateway: it answers every request as a real one
    would, so that a client that reached it would carry on (and has sent
    its token)."""
    return fake(lambda m, p, b: (200, {"version": "x"}))


# ---- the local records of streams -------------------------------------------


def reach_from_record(uid: str, side: str, token: str) -> None:
    """What s2uc status does with a record (and a later notebook resuming
    its stream): read it and ask the gateway it names, with the user's
    token."""
    rec = Sessions().load(uid)
    assert rec is not None
    with scistream.Client(rec[side]["s2cs"], server_cert=rec[side].get("server_cert"), token=token) as c:
        c.request("GET", f"/v1/streams/{uid}")


def rewrite(rec: Path, g: Any, certs: Any) -> bytes:
    """The attacker's rewrite of a record: its inbound side is now their
    gateway, pinned by their certificate's fingerprint."""
    sess = json.loads(rec.read_text())
    der = scistream._tls.parse_one_cert_pem(certs["fake"][0].read_text())
    sess["inbound"]["s2cs"] = g.addr
    sess["inbound"]["server_cert"] = "sha256:" + scistream._tls.fingerprint(der)
    data = json.dumps(sess).encode()  # one line: a save by the client would be indented
    rec.write_bytes(data)
    return data


ATTACKS: dict[str, tuple[Callable[[Path], None], str]] = {
    "directory writable by others": (lambda rec: rec.parent.chmod(0o777),
                                     "stream records directory {dir} can be written by other users (mode 0777), who could put another file in place of what is in it: chmod go-w {dir}"),
    "record writable by others": (lambda rec: rec.chmod(0o666),
                                  "stream record {rec} can be written by other users (mode 0666): chmod go-w {rec}"),
    "record owned by another user": (lambda rec: os.chown(rec, OTHER, OTHER),
                                     "stream record {rec} is owned by uid 65534 (nobody), not by root, the running user, and its owner can change it: chown root {rec}, or use a copy of your own"),
    "home writable by others": (lambda rec: rec.parent.parent.chmod(0o777),
                                "stream records directory {dir}: directory {home} can be written by other users (mode 0777), who could put another file in place of what is in it: "
                                "chmod go-w {home}"),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_record_others_could_write_is_not_trusted(attack: str, pair: Pair, echo: Echo, fake: Any, certs: Any,
                                                  isolated_env: Path) -> None:
    """A stream's record rewritten to name the attacker's gateway, where
    others could write it: reading it to reach the stream's gateway is
    refused with the fix, so the attacker gets no request; the release
    releases both sides all the same, says why it left the record alone,
    and does not save it back as the client's own (0600, the attacker's
    side kept)."""
    g = attacker_gateway(fake)
    change, want = ATTACKS[attack]
    refused: Optional[BaseException] = None
    release_err: Optional[BaseException] = None
    try:
        with scistream.stream(target=("127.0.0.1", echo.port), **pair.stream_kw()) as s:
            uid = s.uid or ""
            assert uid
            rec = isolated_env / "streams" / f"{uid}.json"
            data = rewrite(rec, g, certs)
            change(rec)
            msg = want.format(dir=rec.parent, rec=rec, home=rec.parent.parent)
            try:
                reach_from_record(uid, "inbound", pair.tokens["alice"])
            except scistream.ConfigError as e:
                refused = e
    except scistream.SciStreamError as e:
        release_err = e
    assert token_requests(g) == []  # never reached: the token stayed home
    assert str(refused) == msg
    assert f"keep the record of released stream {uid}: {msg}" in str(release_err)
    with pair.client(pair.cons) as ci, pair.client(pair.prod) as co:
        assert ci.get(uid).state == co.get(uid).state == "released"
    assert rec.read_bytes() == data


def test_records_directory_others_can_write_refused_before_any_stream(pair: Pair, echo: Echo, isolated_env: Path) -> None:
    """A records directory others can write: the stream is not wired (its
    secret would be kept there), and the gateways were not asked."""
    d = isolated_env / "streams"
    d.mkdir(mode=0o700, parents=True)
    d.chmod(0o777)
    with pair.client(pair.cons) as ci:
        before = {s.uid for s in ci.list(all=True)}
        with pytest.raises(scistream.ConfigError, match=f"stream records directory {d} can be written by other users "
                                                         rf"\(mode 0777\), who could put another file in place of what is in it: chmod go-w {d}$"):
            scistream.stream(target=("127.0.0.1", echo.port), **pair.stream_kw()).__enter__()
        assert {s.uid for s in ci.list(all=True)} == before
    assert os.listdir(d) == []


# ---- a pinned server_cert ----------------------------------------------------


def pin_attacks(tmp_path: Path, attacker_crt: Path) -> dict[str, tuple[Path, str]]:
    """A pin file the attacker could rewrite (and did: it holds their
    certificate), each way, and the refusal."""
    out: dict[str, tuple[Path, str]] = {}
    d = tmp_path / "writable"
    d.mkdir()
    p = d / "gw.crt"
    p.write_bytes(attacker_crt.read_bytes())
    p.chmod(0o666)
    out["pin writable by others"] = (p, f"server_cert {p} can be written by other users (mode 0666): chmod go-w {p}")
    d = tmp_path / "owned"
    d.mkdir()
    p = d / "gw.crt"
    p.write_bytes(attacker_crt.read_bytes())
    os.chown(p, OTHER, OTHER)
    out["pin owned by another user"] = (p, f"server_cert {p} is owned by uid 65534 (nobody), not by root, the running user, and its owner can change it: chown root {p}, or use a copy of your own")
    d = tmp_path / "opendir"
    d.mkdir()
    p = d / "gw.crt"
    p.write_bytes(attacker_crt.read_bytes())
    d.chmod(0o777)
    out["pin's directory writable by others"] = (
        p, f"server_cert {p}: directory {d} can be written by other users (mode 0777), who could put another file in place of what is in it: chmod go-w {d}")
    # A pin in a safe place, a symlink to a file in the attacker's
    # directory: the directory along the chain is checked.
    far = tmp_path / "far"
    far.mkdir()
    target = far / "real.crt"
    target.write_bytes(attacker_crt.read_bytes())
    far.chmod(0o777)
    safe = tmp_path / "safe"
    safe.mkdir()
    link = safe / "gw.crt"
    link.symlink_to(os.path.relpath(target, safe))
    out["pin linked into a directory others can write"] = (
        link, f"server_cert {link}: directory {far} can be written by other users (mode 0777), who could put another file in place of what is in it: "
              f"chmod go-w {far}")
    return out


@pytest.mark.parametrize("attack", ["pin writable by others", "pin owned by another user", "pin's directory writable by others",
                                    "pin linked into a directory others can write"])
def test_pin_others_could_write_refused_before_the_token(attack: str, tmp_path: Path, fake: Any, certs: Any) -> None:
    """The attacker on the gateway's address rewrote the pinned server_cert
    to hold their certificate: the client refuses the pin with the fix
    before any connection, and the attacker gets no token."""
    g = attacker_gateway(fake)
    pin, want = pin_attacks(tmp_path, certs["fake"][0])[attack]
    with pytest.raises(scistream.SciStreamError) as ei:
        with scistream.Client(g.addr, server_cert=str(pin), token="the-users-token") as c:
            c.info()
    assert token_requests(g) == []
    assert isinstance(ei.value, scistream.ConfigError) and str(ei.value) == want, str(ei.value)


def test_pin_as_expected_and_a_pipe_left_alone(tmp_path: Path, fake: Any, certs: Any) -> None:
    """A pin only its owner (or root) can write is used; so is a pipe
    (process substitution), whatever its mode: it is not a file someone
    could rewrite later."""
    g = fake(lambda m, p, b: (200, {"status": "ok"}))
    with scistream.Client(g.addr, server_cert=str(certs["fake"][0]), token="t") as c:
        assert c.health().status == "ok"
    fifo = tmp_path / "pin.fifo"
    os.mkfifo(fifo, 0o666)
    fifo.chmod(0o666)
    pem = certs["fake"][0].read_bytes()

    def write() -> None:
        with open(fifo, "wb") as f:
            f.write(pem)
    t = threading.Thread(target=write, daemon=True)
    t.start()
    with scistream.Client(g.addr, server_cert=str(fifo), token="t") as c:
        assert c.health().status == "ok"
    t.join(10)


# ---- the configuration file ---------------------------------------------------


@pytest.mark.parametrize("attack", ["owned by another user", "writable by others", "directory writable by others"])
def test_configuration_file_others_could_write_refused(attack: str, tmp_path: Path, fake: Any, certs: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A configuration file (mode 0644) that another user owns, or others
    can write, or in a directory others can write, names the attacker's
    gateway and certificate: refused with the fix, and the token the
    environment gives goes nowhere."""
    g = attacker_gateway(fake)
    d = tmp_path / "cfg"
    d.mkdir()
    pin = tmp_path / "attacker.crt"
    pin.write_bytes(certs["fake"][0].read_bytes())
    cfg = d / "config.yaml"
    cfg.write_text(f"s2cs: {g.addr}\nserver_cert: {pin}\n")
    cfg.chmod(0o644)
    if attack == "owned by another user":
        os.chown(cfg, OTHER, OTHER)
        want = f"configuration file {cfg} is owned by uid 65534 (nobody), not by root, the running user, and its owner can change it: chown root {cfg}, or use a copy of your own"
    elif attack == "writable by others":
        cfg.chmod(0o646)
        want = f"configuration file {cfg} can be written by other users (mode 0646): chmod go-w {cfg}"
    else:
        d.chmod(0o757)
        want = f"configuration file {cfg}: directory {d} can be written by other users (mode 0757), who could put another file in place of what is in it: chmod go-w {d}"
    monkeypatch.setenv("SCISTREAM_CONFIG", str(cfg))
    monkeypatch.setenv("SCISTREAM_TOKEN", "the-users-token")
    with pytest.raises(scistream.SciStreamError) as ei:
        with scistream.Client() as c:
            c.info()
    assert token_requests(g) == []
    assert isinstance(ei.value, scistream.ConfigError) and str(ei.value) == want, str(ei.value)


def test_configuration_from_a_pipe_left_alone(tmp_path: Path) -> None:
    fifo = tmp_path / "cfg.fifo"
    os.mkfifo(fifo, 0o666)
    fifo.chmod(0o666)

    def write() -> None:
        with open(fifo, "w") as f:
            f.write("s2cs: 10.0.0.5:5000\n")
    t = threading.Thread(target=write, daemon=True)
    t.start()
    assert scistream.Config.load(fifo).settings().s2cs == "10.0.0.5:5000"
    t.join(10)


def test_login_ca_file_others_can_write_refused(tmp_path: Path, isolated_env: Path, certs: Any, fake: Any) -> None:
    """The login's ca_file says who the identity provider is (to whom the
    refresh token goes): one others can write is refused like a pin."""
    from scistream.auth import LoginError, LoginStore
    idp = fake(lambda m, p, b: (200, {"access_token": "new"}))
    ca = tmp_path / "idp.crt"
    ca.write_bytes(certs["fake"][0].read_bytes())
    ca.chmod(0o664)
    isolated_env.mkdir(mode=0o700, parents=True, exist_ok=True)
    p = isolated_env / "login.json"
    p.write_text(json.dumps({"issuer": "https://idp.example", "client_id": "s2uc", "ca_file": str(ca),
                             "token_endpoint": f"https://{idp.addr}/token", "access_token": "old", "refresh_token": "r1",
                             "expiry": "2000-01-01T00:00:00Z"}))
    p.chmod(0o600)
    err: Optional[BaseException] = None
    try:
        LoginStore(p).token()
    except LoginError as e:
        err = e
    assert idp.requests == []  # the refresh token stayed home
    assert str(err) == f"the login's ca_file {ca} can be written by other users (mode 0664): chmod go-w {ca}"


def test_records_kept_whatever_the_umask(isolated_env: Path) -> None:
    """Under a umask that leaves new directories group-writable (002, as
    with user private groups), the directories the client makes for its
    records are 0700 all the same, so that it can use them."""
    old = os.umask(0o002)
    try:
        ss = Sessions()
        uid = "00000000-0000-4000-8000-000000000001"
        ss.save({"uid": uid, "secret": ""})
        assert ss.load(uid) == {"uid": uid, "secret": ""}
    finally:
        os.umask(old)
    assert [oct(p.stat().st_mode & 0o777) for p in (isolated_env, isolated_env / "streams")] == ["0o700", "0o700"]
    assert oct((isolated_env / "streams" / f"{uid}.json").stat().st_mode & 0o777) == "0o600"


# ---- the cases that pass, as under s2uc's rule (internal/trustfile) ---------


def test_sticky_directory_and_its_links(tmp_path: Path) -> None:
    """A sticky directory others may write (as /tmp) holds a trusted
    name when the name is the user's or root's: others cannot replace
    it. A symlink in one that another user owns is refused: its owner
    could point it elsewhere. The same directory without the sticky bit
    is refused."""
    from scistream import _files
    d = tmp_path / "sticky"
    d.mkdir()
    d.chmod(0o1777)
    f = d / "gw.crt"
    f.write_text("pin")
    f.chmod(0o644)
    assert _files.read(str(f), "server_cert", 100) == b"pin"
    real = tmp_path / "real.crt"
    real.write_text("elsewhere")
    link = d / "link.crt"
    link.symlink_to(real)
    assert _files.read(str(link), "server_cert", 100) == b"elsewhere"
    os.lchown(link, OTHER, OTHER)
    with pytest.raises(scistream.ConfigError, match=f"the symbolic link {link}, in directory {d}, which others may write"):
        _files.read(str(link), "server_cert", 100)
    d.chmod(0o777)
    with pytest.raises(scistream.ConfigError, match=f"directory {d} can be written by other users"):
        _files.read(str(f), "server_cert", 100)


def test_swapped_after_open_refused(tmp_path: Path) -> None:
    """The file judged is the one opened: a name that resolves to
    another file once opened is refused."""
    from scistream import _files
    p = tmp_path / "gw.crt"
    p.write_text("first")
    fd = os.open(p, os.O_RDONLY)
    try:
        os.rename(p, tmp_path / "old.crt")
        p.write_text("second")
        with pytest.raises(scistream.ConfigError, match="changed while it was being checked"):
            _files.check_open(fd, str(p), "server_cert")
    finally:
        os.close(fd)
