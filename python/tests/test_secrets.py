"""No repr, str or pprint of a model or of a client or configuration
object shows a secret (notebooks echo the last expression, and notebooks
are shared)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import pprint
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

import scistream
from scistream import models
from scistream.auth import LoginStore

# ---- secrets in repr and str ----------------------------------------------

SECRET_FIELD = re.compile(r"secret|token|password|passwd|credential|private|key$")
MARK = "S3CRET-" + uuid.uuid4().hex


def shown(obj: Any) -> str:
    """Every text a notebook, a log or a print may show of obj (its HTML
    table too, where it has one)."""
    html = obj._repr_html_() if hasattr(obj, "_repr_html_") else ""
    return "\n".join([repr(obj), str(obj), f"{obj}", pprint.pformat(obj), pprint.pformat([obj]), html])


def value_for(tp: Any) -> Any:
    return {"str": "x", "int": 1, "float": 1.0, "bool": True}.get(getattr(tp, "__name__", ""), None)


def test_no_model_shows_a_secret() -> None:
    """Every model of scistream.models with a field that holds a secret
    (its name says so): repr, str, format and pprint show none of it; the
    request's JSON still carries it."""
    with_secret = []
    for name in models.__all__:
        cls: Any = getattr(models, name)
        if not isinstance(cls, type) or not hasattr(cls, "__dataclass_fields__"):
            continue
        hints = models._hints(cls)
        secret = [f.name for f in dataclasses.fields(cls) if SECRET_FIELD.search(f.name)]
        if not secret:
            continue
        with_secret.append(name)
        kw: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name in secret:
                kw[f.name] = MARK
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                tp = models._strip_optional(hints[f.name])
                kw[f.name] = [] if getattr(tp, "__origin__", None) is list else (
                    dt.datetime.now(dt.timezone.utc) if tp is dt.datetime else value_for(tp))
        obj = cls(**kw)
        assert MARK not in shown(obj), (name, shown(obj))
        if cls is models.Stream:
            assert MARK not in shown(models.StreamList(streams=[obj]))
        assert MARK in json.dumps(models.to_json(obj))  # the wire still has it
    assert {"OutboundRequest", "Stream"} <= set(with_secret), with_secret


def test_configuration_keeps_no_token_of_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Config keeps the variables it reads, not SCISTREAM_TOKEN (nor any
    other of the environment): no dump of it (vars, a debugger) shows it."""
    from scistream.config import Config
    monkeypatch.setenv("SCISTREAM_TOKEN", MARK)
    monkeypatch.setenv("SCISTREAM_S2CS", "10.0.0.5:5000")
    cfg = Config.load(tmp_path / "none.yaml")
    assert cfg.settings().s2cs == "10.0.0.5:5000"
    assert MARK not in shown(cfg) + str(vars(cfg))


def test_no_client_or_configuration_object_shows_a_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The objects that hold a token or a secret (clients, the
    configuration, the login store, the wiring's own) show none of it."""
    from scistream.config import Config
    from scistream.wiring import Sessions, StreamStatus, _Spec
    tok = tmp_path / "tok"
    tok.write_text(MARK + "-file")
    tok.chmod(0o600)
    monkeypatch.setenv("SCISTREAM_TOKEN", MARK + "-env")
    cfg = Config.load(tmp_path / "none.yaml")
    objs: list[Any] = [cfg, cfg.settings(), LoginStore(tmp_path / "login.json"), Sessions(tmp_path / "streams")]
    for kw in ({"token": MARK}, {"token_file": str(tok)}, {}):
        objs += [scistream.Client("127.0.0.1:1", **kw), scistream.AsyncClient("127.0.0.1:1", **kw)]
    now = dt.datetime.now(dt.timezone.utc)
    st = models.Stream(uid=str(uuid.uuid4()), role="inbound", state="wired", owner="a", listeners=[], targets=[], num_conn=1,
                       wan="tls", engine="splice", created=now, updated=now, secret=MARK)
    objs.append(StreamStatus(inbound=st, outbound=st))
    spec = _Spec("127.0.0.1:1", "127.0.0.1:2", ("127.0.0.1", 9), token=MARK, config=cfg)
    objs.append(spec)
    w = scistream.stream("127.0.0.1:1", "127.0.0.1:2", ("127.0.0.1", 9), token=MARK, config=cfg)
    w.inbound = st
    aw = scistream.astream("127.0.0.1:1", "127.0.0.1:2", ("127.0.0.1", 9), token=MARK, config=cfg)
    aw.inbound = st
    objs += [w, aw]
    for o in objs:
        assert MARK not in shown(o), (type(o).__name__, shown(o))
    for o in objs:
        if isinstance(o, scistream.Client):
            o.close()
        elif isinstance(o, scistream.AsyncClient):
            asyncio.run(o.aclose())
    w.inbound_client.close()
    w.outbound_client.close()
    asyncio.run(aw.inbound_client.aclose())
    asyncio.run(aw.outbound_client.aclose())
