"""s2uc and the Python library read the same configuration file, profiles
and environment the same way (docs/client.md): for each case both reach
real gateways, and must reach the same one with the same token (its
listener_ip and the identity it saw), or both refuse the file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Optional

import pytest

import scistream

from conftest import Echo, Pair


def run_s2uc(pair: Pair, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(pair.bins / "s2uc"), *args], env=env, capture_output=True, text=True, timeout=60)


def python_info(env: dict[str, str], profile: Optional[str], monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    with monkeypatch.context() as m:
        for k in list(os.environ):
            if k.startswith("SCISTREAM_"):
                m.delenv(k)
        for k, v in env.items():
            m.setenv(k, v)
        with scistream.Client(profile=profile) as c:
            i = c.info()
            return i.listener_ip, i.identity


@pytest.fixture
def setup(pair: Pair, tmp_path: Path) -> dict[str, Any]:
    home = tmp_path / "userhome"
    home.mkdir()
    toks = {}
    for who in ("alice", "bob", "user00", "user01"):
        p = home / f"tok-{who}"
        p.write_text(pair.tokens[who])
        p.chmod(0o600)
        toks[who] = str(p)
    cfgdir = tmp_path / "cfg"
    cfgdir.mkdir()
    shutil.copy(pair.cons.cert, cfgdir / "cons.crt")  # for a path relative to the file
    base = {k: v for k, v in os.environ.items() if not k.startswith("SCISTREAM_")}
    base.update({"HOME": str(home), "SCISTREAM_HOME": str(tmp_path / "s2home"), "SCISTREAM_CONFIG": str(cfgdir / "config.yaml")})
    return {"toks": toks, "cfg": cfgdir / "config.yaml", "env": base}


def case_text(pair: Pair, toks: dict[str, str], name: str) -> tuple[str, dict[str, str], Optional[str]]:
    A, B = pair.cons, pair.prod
    cases: dict[str, tuple[str, dict[str, str], Optional[str]]] = {
        "top level": (f"s2cs: {A.addr}\nserver_cert: {A.cert}\ntoken_file: {toks['alice']}\n", {}, None),
        "profile key": (f"profile: p\ns2cs: {A.addr}\nserver_cert: {A.cert}\ntoken_file: {toks['alice']}\n"
                        f"profiles:\n  p:\n    s2cs: {B.addr}\n    server_cert: {B.cert}\n    token_file: {toks['bob']}\n", {}, None),
        "profile argument beats the file's": (f"profile: q\ns2cs: {A.addr}\nserver_cert: {A.cert}\ntoken_file: {toks['alice']}\n"
                                              f"profiles:\n  q: {{}}\n  p:\n    s2cs: {B.addr}\n    server_cert: {B.cert}\n", {}, "p"),
        "SCISTREAM_PROFILE": (f"s2cs: {A.addr}\nserver_cert: {A.cert}\ntoken_file: {toks['alice']}\n"
                              f"profiles:\n  p:\n    s2cs: {B.addr}\n    server_cert: {B.cert}\n", {"SCISTREAM_PROFILE": "p"}, None),
        "environment beats the profile": (f"profile: p\ntoken_file: {toks['bob']}\nprofiles:\n  p:\n    s2cs: {B.addr}\n    server_cert: {B.cert}\n",
                                          {"SCISTREAM_S2CS": A.addr, "SCISTREAM_SERVER_CERT": A.cert}, None),
        "a token file beats SCISTREAM_TOKEN": (f"s2cs: {A.addr}\nserver_cert: {A.cert}\ntoken_file: {toks['bob']}\n",
                                               {"SCISTREAM_TOKEN": pair.tokens["alice"]}, None),
        "SCISTREAM_TOKEN without a token file": (f"s2cs: {A.addr}\nserver_cert: {A.cert}\n", {"SCISTREAM_TOKEN": pair.tokens["user00"]}, None),
        "SCISTREAM_TOKEN_FILE beats the profile": (f"profile: p\nprofiles:\n  p:\n    s2cs: {A.addr}\n    server_cert: {A.cert}\n    token_file: {toks['bob']}\n",
                                                   {"SCISTREAM_TOKEN_FILE": toks["user01"]}, None),
        "paths relative to the file, ~ expanded": (f"s2cs: {A.addr}\nserver_cert: cons.crt\ntoken_file: ~/tok-bob\n", {}, None),
        "a side key does not serve a single gateway": (f"s2cs: {A.addr}\nserver_cert: {A.cert}\ntoken_file: {toks['alice']}\n"
                                                       f"inbound_s2cs: {B.addr}\ninbound_token_file: {toks['bob']}\n", {}, None),
    }
    return cases[name]


CASES = ["top level", "profile key", "profile argument beats the file's", "SCISTREAM_PROFILE", "environment beats the profile",
         "a token file beats SCISTREAM_TOKEN", "SCISTREAM_TOKEN without a token file", "SCISTREAM_TOKEN_FILE beats the profile",
         "paths relative to the file, ~ expanded", "a side key does not serve a single gateway"]


@pytest.mark.parametrize("name", CASES)
def test_same_gateway_and_token(name: str, pair: Pair, setup: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    text, extra, profile = case_text(pair, setup["toks"], name)
    setup["cfg"].write_text(text)
    setup["cfg"].chmod(0o600)
    env = {**setup["env"], **extra}
    out = run_s2uc(pair, ["info", "--output", "json"] + (["--profile", profile] if profile else []), env)
    assert out.returncode == 0, out.stderr
    go = json.loads(out.stdout)
    py = python_info({k: v for k, v in env.items() if k.startswith("SCISTREAM_")} | {"HOME": env["HOME"]}, profile, monkeypatch)
    assert (go["listener_ip"], go["identity"]) == py


BAD_FILES = {
    "unknown key": "s2cs: a:1\nservr_cert: x\n",
    "key twice": "s2cs: a:1\ns2cs: b:1\n",
    "null value": "s2cs:\n",
    "list value": "s2cs: [a, b]\n",
    "profile twice": "profiles:\n  p: {}\n  p: {}\n",
    "unknown key in a profile": "profiles:\n  p:\n    tokenfile: x\n",
    "unknown profile": "profile: nope\nprofiles:\n  p: {}\n",
    "bad output": "output: yaml\n",
}


@pytest.mark.parametrize("name", sorted(BAD_FILES) + ["written by others"])
def test_both_refuse(name: str, pair: Pair, setup: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    setup["cfg"].write_text(BAD_FILES.get(name, "s2cs: a:1\n"))
    setup["cfg"].chmod(0o620 if name == "written by others" else 0o600)
    out = run_s2uc(pair, ["info"], setup["env"])
    assert out.returncode == 2, (out.returncode, out.stderr)
    with pytest.raises(scistream.ConfigError) as ei:
        python_info({k: v for k, v in setup["env"].items() if k.startswith("SCISTREAM_")}, None, monkeypatch)
    assert str(setup["cfg"]) in str(ei.value) or name == "unknown profile"


def test_both_refuse_a_missing_file_scistream_config_names(pair: Pair, setup: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A file SCISTREAM_CONFIG names that is not there (a typo) is refused
    by both, naming the variable, not taken for no file."""
    env = {**setup["env"], "SCISTREAM_CONFIG": str(setup["cfg"]) + ".typo"}
    out = run_s2uc(pair, ["info"], env)
    assert out.returncode == 2, (out.returncode, out.stderr)
    want = f"SCISTREAM_CONFIG names {setup['cfg']}.typo, which does not exist"
    assert out.stderr.startswith("s2uc: " + want), out.stderr
    with pytest.raises(scistream.ConfigError) as ei:
        python_info({k: v for k, v in env.items() if k.startswith("SCISTREAM_")}, None, monkeypatch)
    assert str(ei.value).startswith(want), ei.value


@pytest.mark.parametrize("where", ["--token_file", "SCISTREAM_TOKEN_FILE", "configuration file"])
def test_s2uc_on_a_python_stream(where: str, pair: Pair, setup: dict[str, Any], echo: Echo, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream made in Python, whose local record names no token file (the
    token came from token= or the configuration file), is shown and
    released by s2uc with the token only in --token_file, only in
    SCISTREAM_TOKEN_FILE, or only in the configuration file (each side's
    key, as Python took it: here bob's on the inbound side, alice's on the
    outbound); released again, it is success, said as such."""
    toks = setup["toks"]
    cfg, args, extra, owners = "", [], {}, {"inbound": "alice", "outbound": "alice"}
    if where == "--token_file":
        args = ["--token_file", toks["alice"]]
    elif where == "SCISTREAM_TOKEN_FILE":
        extra = {"SCISTREAM_TOKEN_FILE": toks["alice"]}
    else:
        cfg = f"token_file: {toks['alice']}\ninbound_token_file: {toks['bob']}\n"
        owners["inbound"] = "bob"
    setup["cfg"].write_text(cfg)
    setup["cfg"].chmod(0o600)
    env = {**setup["env"], **extra}
    with monkeypatch.context() as m:
        for k, v in env.items():
            if k.startswith("SCISTREAM_") or k == "HOME":
                m.setenv(k, v)
        token: dict[str, Any] = {} if where == "configuration file" else {"token": pair.tokens["alice"]}
        s = scistream.stream(inbound=pair.cons.addr, outbound=pair.prod.addr, inbound_server_cert=pair.cons.cert,
                             outbound_server_cert=pair.prod.cert, target=("127.0.0.1", echo.port), **token).open()
        uid = s.uid or ""
        s.inbound_client.close()  # left to s2uc, as a notebook that ended leaves it
        s.outbound_client.close()
    record = json.loads((Path(env["SCISTREAM_HOME"]) / "streams" / f"{uid}.json").read_text())
    assert "token_file" not in record["inbound"] and "token_file" not in record["outbound"], record
    st = run_s2uc(pair, ["status", uid, "--output", "json", *args], env)
    assert st.returncode == 0, st.stderr
    views = json.loads(st.stdout)["gateways"]
    assert {v["role"]: v["owner"] for v in views} == owners, views
    rel = run_s2uc(pair, ["release", uid, *args], env)
    assert rel.returncode == 0, rel.stderr
    assert f"released {uid} on {pair.prod.addr} (outbound)" in rel.stdout and f"released {uid} on {pair.cons.addr} (inbound)" in rel.stdout
    again = run_s2uc(pair, ["release", uid, *args], env)
    assert again.returncode == 0 and again.stdout.startswith(f"stream {uid} already released (at "), (again.stdout, again.stderr)
    assert again.stdout.endswith(" by alice)\n"), again.stdout  # the outbound side goes first
    again = run_s2uc(pair, ["release", uid, "--output", "json", *args], env)
    assert again.returncode == 0 and json.loads(again.stdout)["already_released"] is True, again


def test_sides_of_a_stream(pair: Pair, setup: dict[str, Any], echo: Echo, monkeypatch: pytest.MonkeyPatch) -> None:
    """s2uc stream and scistream.stream take the same side keys: each side's
    gateway and token, a side key of the file beating SCISTREAM_S2CS."""
    toks = setup["toks"]
    setup["cfg"].write_text(f"token_file: {toks['alice']}\nprofiles:\n  lab:\n"
                            f"    inbound_s2cs: {pair.cons.addr}\n    inbound_server_cert: {pair.cons.cert}\n"
                            f"    inbound_token_file: {toks['bob']}\n"
                            f"    outbound_s2cs: {pair.prod.addr}\n    outbound_server_cert: {pair.prod.cert}\n")
    setup["cfg"].chmod(0o600)
    env = {**setup["env"], "SCISTREAM_S2CS": "127.0.0.1:1", "SCISTREAM_PROFILE": "lab"}
    out = run_s2uc(pair, ["stream", "--remote_ip", "127.0.0.1", "--receiver_ports", str(echo.port), "--output", "json"], env)
    assert out.returncode == 0, out.stderr
    go = json.loads(out.stdout)
    rel = run_s2uc(pair, ["release", go["uid"]], env)
    assert rel.returncode == 0, rel.stderr
    with monkeypatch.context() as m:
        for k, v in env.items():
            if k.startswith("SCISTREAM_") or k == "HOME":
                m.setenv(k, v)
        with scistream.stream(target=("127.0.0.1", echo.port)) as s:
            assert s.inbound and s.outbound
            py = {"inbound": (s.inbound.owner, s.inbound.listeners[0].split(":")[0]),
                  "outbound": (s.outbound.owner, s.outbound.listeners[0].split(":")[0])}
    assert py == {side: (go[side]["owner"], go[side]["listeners"][0].split(":")[0]) for side in ("inbound", "outbound")}
    assert py == {"inbound": ("bob", pair.cons.ip), "outbound": ("alice", pair.prod.ip)}
