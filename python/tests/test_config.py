"""Credentials and the configuration file as s2uc takes them
(/work/notes/client-config.md, docs/python.md): where the file is, its
refusals, profiles, precedence, side-specific keys, token sources."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import scistream
from scistream.config import Config, config_path

from conftest import Echo, Pair, roundtrip


def write(p: Path, text: str, mode: int = 0o600) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    p.chmod(mode)
    return p


def test_config_path(tmp_path: Path) -> None:
    assert config_path({"SCISTREAM_CONFIG": "/x/c.yaml", "SCISTREAM_HOME": "/h"}) == Path("/x/c.yaml")
    assert config_path({"SCISTREAM_HOME": "/h", "XDG_CONFIG_HOME": "/x"}) == Path("/h/config.yaml")
    assert config_path({"XDG_CONFIG_HOME": "/x"}) == Path("/x/scistream/config.yaml")
    assert config_path({}) == Path.home() / ".config/scistream/config.yaml"


def test_missing_file_is_no_error(tmp_path: Path) -> None:
    assert Config.load(tmp_path / "none.yaml").settings().s2cs is None
    assert Config.load(env={"SCISTREAM_HOME": str(tmp_path)}).path is None


def test_scistream_config_naming_no_file_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SCISTREAM_CONFIG names a file on purpose: a mistyped name is a
    ConfigError naming the variable and the path, as in s2uc, not a
    silent "no configuration"."""
    (tmp_path / "config.yaml").write_text("s2cs: 10.0.0.5:5000\n")
    typo = tmp_path / "config.yml"
    want = f"SCISTREAM_CONFIG names {typo}, which does not exist: correct it, or unset SCISTREAM_CONFIG"
    with pytest.raises(scistream.ConfigError) as e:
        Config.load(env={"SCISTREAM_CONFIG": str(typo)})
    assert str(e.value).startswith(want), e.value
    monkeypatch.setenv("SCISTREAM_CONFIG", str(typo))
    with pytest.raises(scistream.ConfigError, match="^SCISTREAM_CONFIG names "):
        scistream.Client(token="t")


def test_refusals(tmp_path: Path) -> None:
    p = write(tmp_path / "c.yaml", "s2cs: a:1\n", 0o664)
    with pytest.raises(scistream.ConfigError, match=r"can be written by other users \(mode 0664\): chmod go-w"):
        Config.load(p)
    p = write(tmp_path / "c.yaml", "s2cs: a:1\nserver_crt: x\n")
    with pytest.raises(scistream.ConfigError, match=r"c.yaml: line 2: server_crt: unknown key; did you mean server_cert\?"):
        Config.load(p)
    p = write(tmp_path / "c.yaml", "profiles:\n  ornl:\n    tokenfile: x\n")
    with pytest.raises(scistream.ConfigError, match=r"line 3: profile ornl: tokenfile: unknown key; did you mean token_file\?"):
        Config.load(p)
    p = write(tmp_path / "c.yaml", "output: yaml\n")
    with pytest.raises(scistream.ConfigError, match="use text or json"):
        Config.load(p).settings()  # resolved with the profile, as s2uc resolves it
    p = write(tmp_path / "c.yaml", "profiles:\n  ornl: {s2cs: a:1}\n  anl: {s2cs: b:1}\n")
    with pytest.raises(scistream.ConfigError, match="unknown profile 'olcf': give one of anl, ornl"):
        Config.load(p).settings(profile="olcf")


def test_precedence_profiles_and_sides(tmp_path: Path) -> None:
    p = write(tmp_path / "c.yaml", """
profile: ornl
s2cs: top:1
server_cert: top.crt
token_file: ~/top-token
inbound_s2cs: top-in:1
profiles:
  ornl:
    s2cs: ornl:1
    outbound_s2cs: ornl-out:1
    server_cert: /abs/ornl.crt
  bare: {}
""")
    cfg = Config.load(p, env={})
    st = cfg.settings()
    assert (st.s2cs, st.server_cert, st.profile) == ("ornl:1", "/abs/ornl.crt", "ornl")
    assert st.token_file == os.path.expanduser("~/top-token")
    assert cfg.settings("outbound").s2cs == "ornl-out:1"       # the profile's side key
    # Merged key by key, then a side falls back to the plain key: the top
    # level's inbound_s2cs is the inbound side's, not the profile's s2cs.
    assert cfg.settings("inbound").s2cs == "top-in:1"
    bare = cfg.settings(profile="bare")
    assert bare.s2cs == "top:1" and bare.server_cert == str(tmp_path / "top.crt")  # relative to the file
    env = Config.load(p, env={"SCISTREAM_PROFILE": "bare", "SCISTREAM_S2CS": "env:1"})
    # The environment changes the plain key: a side the file names a gateway for keeps it.
    assert env.settings().s2cs == "env:1" and env.settings("outbound").s2cs == "env:1"
    assert env.settings("inbound").s2cs == "top-in:1" and env.settings().profile == "bare"


def test_client_from_profile_and_token_file(pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client and a stream configured by a profile alone reach real gateways."""
    cfg = write(tmp_path / "cfg.yaml", f"""
profile: lab
profiles:
  lab:
    inbound_s2cs: {pair.cons.addr}
    inbound_server_cert: {pair.cons.cert}
    outbound_s2cs: {pair.prod.addr}
    outbound_server_cert: {pair.prod.cert}
    token_file: {pair.token_file("bob")}
    s2cs: {pair.cons.addr}
    server_cert: {pair.cons.cert}
""")
    monkeypatch.setenv("SCISTREAM_CONFIG", str(cfg))
    with scistream.Client() as c:
        assert c.info().identity == "bob"
    # SCISTREAM_TOKEN is used only when no token file is given at all: the
    # profile's token_file beats it ...
    monkeypatch.setenv("SCISTREAM_TOKEN", pair.tokens["alice"])
    with scistream.Client() as c:
        assert c.info().identity == "bob"
    # ... SCISTREAM_TOKEN_FILE beats the profile, the argument both.
    monkeypatch.setenv("SCISTREAM_TOKEN_FILE", pair.token_file("user00"))
    with scistream.Client() as c:
        assert c.info().identity == "user00"
    with scistream.Client(token_file=pair.token_file("user01")) as c:
        assert c.info().identity == "user01"
    monkeypatch.delenv("SCISTREAM_TOKEN_FILE")
    monkeypatch.delenv("SCISTREAM_TOKEN")
    echo = Echo()
    try:
        with scistream.stream(target=("127.0.0.1", echo.port)) as s:
            assert s.inbound_client.addr == pair.cons.addr and s.outbound_client.addr == pair.prod.addr
            assert roundtrip(s.listener, b"x" * 1000) == b"x" * 1000
    finally:
        echo.close()


def test_token_file_readable_by_others_refused(tmp_path: Path) -> None:
    p = write(tmp_path / "tok", "t", 0o644)
    with pytest.raises(scistream.ConfigError, match="chmod 600"):
        scistream.Client("127.0.0.1:1", token_file=str(p))


def test_no_gateway_says_how(tmp_path: Path) -> None:
    with pytest.raises(scistream.ConfigError, match="SCISTREAM_S2CS"):
        scistream.Client()
    with pytest.raises(scistream.ConfigError, match="want HOST:PORT"):
        scistream.Client("gw.example")


def test_stream_without_gateways_names_what_it_takes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No configuration file and no gateway given: the error names
    stream()'s own arguments (inbound=, outbound=) and the keys and file
    that would give them, not Client's s2cs=."""
    monkeypatch.setenv("SCISTREAM_HOME", str(tmp_path))  # its config.yaml: none yet
    with pytest.raises(scistream.ConfigError) as e:
        scistream.stream(target=("127.0.0.1", 9))
    msg = str(e.value)
    assert msg.startswith("no inbound gateway and no outbound gateway: give stream(inbound='HOST:PORT', "
                          "outbound='HOST:PORT', ...)"), msg
    assert "inbound_s2cs and outbound_s2cs" in msg and str(tmp_path / "config.yaml") in msg, msg
    assert "s2cs=" not in msg, msg
    with pytest.raises(scistream.ConfigError, match=r"^no outbound gateway: give astream\(outbound='HOST:PORT', \.\.\.\)"):
        scistream.astream("127.0.0.1:1", target=("127.0.0.1", 9))
    cfg = write(tmp_path / "config.yaml", "inbound_s2cs: 127.0.0.1:1\n")
    with pytest.raises(scistream.ConfigError, match=f"no outbound gateway: .* set outbound_s2cs \\(or s2cs\\) in the configuration file {cfg}"):
        scistream.stream(target=("127.0.0.1", 9))
    w = scistream.stream(outbound="127.0.0.1:2", target=("127.0.0.1", 9), token="t")  # both given: no error, no request
    assert (w.inbound_client.addr, w.outbound_client.addr) == ("127.0.0.1:1", "127.0.0.1:2")
    w.inbound_client.close()
    w.outbound_client.close()


def test_bad_arguments_said_before_any_request(pair: Pair) -> None:
    kw: dict[str, Any] = pair.stream_kw()
    with pytest.raises(scistream.ConfigError, match="num_conn 0"):
        scistream.stream(target=("127.0.0.1", 9), num_conn=0, **kw)
    with pytest.raises(scistream.ConfigError, match="rate '2X'"):
        scistream.stream(target=("127.0.0.1", 9), rate="2X", **kw)
    with pytest.raises(scistream.ConfigError, match="min_rate"):
        scistream.stream(target=("127.0.0.1", 9), rate="1G", min_rate="2G", **kw)
    with pytest.raises(scistream.ConfigError, match="target"):
        scistream.stream(target="127.0.0.1:9", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("text,bps", [("2G", 2 * 10**9), ("10Gbit/s", 10**10), ("100MB/s", 8 * 10**8), ("1.5k", 1500),
                                      ("800 Mbps", 8 * 10**8), ("0", 0)])
def test_parse_rate_as_s2uc(text: str, bps: int) -> None:
    assert scistream.parse_rate(text) == bps


@pytest.mark.parametrize("text", ["", "G", "1.2.3M", "0.5", "11T", "5 X"])
def test_parse_rate_refusals(text: str) -> None:
    with pytest.raises(scistream.ConfigError, match="e.g. 800M"):
        scistream.parse_rate(text)
