"""The public API says what it takes: a docstring on every public function,
class, method and property; typed keyword-only arguments whose misspelling
is a TypeError naming the public function and the nearest keyword, as s2uc
names the nearest flag; stream(), astream() and what they build take the
same arguments."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import re
import types
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import scistream
from scistream import auth, client, config, errors, models, rates, wiring
from scistream.config import Config

MODULES = [scistream, client, config, errors, models, rates, wiring, auth]


def public_objects() -> Iterator[tuple[str, Any]]:
    """Every name of scistream.__all__ and of its modules' __all__, with
    the public methods and properties of the classes among them."""
    seen: set[int] = set()
    for mod in MODULES:
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if id(obj) in seen or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            seen.add(id(obj))
            yield f"{mod.__name__}.{name}", obj
            if not inspect.isclass(obj):
                continue
            for klass in obj.__mro__:
                if not klass.__module__.startswith("scistream"):
                    continue  # object's, Exception's, list's: documented where they come from
                for attr, member in vars(klass).items():
                    if attr.startswith("_"):
                        continue
                    if isinstance(member, (staticmethod, classmethod)):
                        member = member.__func__
                    if isinstance(member, property):
                        member = member.fget
                    if inspect.isfunction(member) and id(member) not in seen:
                        seen.add(id(member))
                        yield f"{mod.__name__}.{name}.{attr}", member


def real_doc(obj: Any) -> str:
    """obj's own docstring; a dataclass's generated one (its signature)
    is none."""
    doc = obj.__doc__ or ""
    if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and doc.startswith(obj.__name__ + "("):
        return ""
    return doc.strip()


def test_every_public_name_has_a_docstring() -> None:
    objs = list(public_objects())
    assert len(objs) > 100, [n for n, _ in objs]  # the walk found the API (classes, methods, properties)
    names = {n for n, _ in objs}
    assert {"scistream.stream", "scistream.Client.inbound", "scistream.AsyncClient.release", "scistream.WiredStream.uid",
            "scistream.Stream.terminal", "scistream.StreamStatus.errors"} <= names
    missing = [name for name, obj in objs if not real_doc(obj)]
    assert not missing, f"public names without a docstring: {missing}"


# ---- keywords --------------------------------------------------------------


@pytest.fixture
def instances(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """One object of each public class with methods that take keywords,
    made without a request (the gateways are never reached)."""
    cfg = Config.load(tmp_path / "none.yaml", env={})
    c = scistream.Client("127.0.0.1:1", token="t", config=cfg)
    ac = scistream.AsyncClient("127.0.0.1:1", token="t", config=cfg)
    w = scistream.stream("127.0.0.1:1", "127.0.0.1:2", ("127.0.0.1", 9), token="t", config=cfg)
    aw = scistream.astream("127.0.0.1:1", "127.0.0.1:2", ("127.0.0.1", 9), token="t", config=cfg)
    yield {"Client": c, "AsyncClient": ac, "WiredStream": w, "AsyncWiredStream": aw}
    c.close()
    w.inbound_client.close()
    w.outbound_client.close()
    for a in (ac, aw.inbound_client, aw.outbound_client):
        asyncio.run(a.aclose())


def keyword_names(f: Callable[..., Any]) -> list[str]:
    return [p.name for p in inspect.signature(f).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in ("self", "cls")]


def typo(name: str) -> str:
    return name + name[-1]  # num_conn -> num_connn


def call(f: Callable[..., Any], **kw: Any) -> None:
    r = f(**kw)
    if inspect.iscoroutine(r):
        asyncio.run(r)


def callables(instances: dict[str, Any]) -> Iterator[tuple[str, Callable[..., Any], list[str]]]:
    """Every public callable of the API that takes keywords, and its
    keywords: the functions of scistream.__all__ with keyword-only
    arguments, Client() and AsyncClient(), and each public method of a
    client and of a wired stream (its object's, bound)."""
    for name in scistream.__all__:
        f = getattr(scistream, name)
        if inspect.isfunction(f) and any(p.kind is p.KEYWORD_ONLY for p in inspect.signature(f).parameters.values()):
            yield f"{name}()", f, keyword_names(f)
    for cls in (scistream.Client, scistream.AsyncClient):
        yield f"{cls.__name__}()", cls, keyword_names(cls.__init__)
    for cname, obj in instances.items():
        for attr in dir(type(obj)):
            if attr.startswith("_") or isinstance(inspect.getattr_static(obj, attr), property):
                continue
            m = getattr(obj, attr)
            if inspect.ismethod(m) and keyword_names(m):
                yield f"{cname}.{attr}()", m, keyword_names(m)


def test_every_misspelt_keyword_names_the_nearest(instances: dict[str, Any]) -> None:
    """Each keyword of each public callable that takes keywords, misspelt:
    a TypeError naming the callable as its caller wrote it and suggesting
    the keyword, before anything runs."""
    checked: list[str] = []
    for name, f, kws in callables(instances):
        for kw in kws:
            with pytest.raises(TypeError) as e:
                call(f, **{typo(kw): 1})
            want = f"{name} got an unexpected keyword argument {typo(kw)!r}: did you mean {kw!r}?"
            assert str(e.value) == want, (name, kw)
        checked.append(name)
    assert {"stream()", "astream()", "Client()", "AsyncClient()", "Client.inbound()", "AsyncClient.inbound()",
            "Client.update()", "AsyncClient.list()", "WiredStream.update()", "AsyncWiredStream.rates()"} <= set(checked), checked
    assert len(checked) >= 24, checked


def test_the_issue_s_example(instances: dict[str, Any]) -> None:
    with pytest.raises(TypeError) as e:
        scistream.stream(target=("127.0.0.1", 9), numconn=2)  # type: ignore[call-arg]
    assert str(e.value) == "stream() got an unexpected keyword argument 'numconn': did you mean 'num_conn'?"
    with pytest.raises(TypeError) as e:
        instances["Client"].inbound(remote_ip="127.0.0.1", receiver_ports=[9], numconn=2)
    assert str(e.value) == "Client.inbound() got an unexpected keyword argument 'numconn': did you mean 'num_conn'?"
    with pytest.raises(TypeError) as e:
        asyncio.run(instances["AsyncClient"].inbound(remote_ip="127.0.0.1", receiver_ports=[9], numconn=2))
    assert str(e.value) == "AsyncClient.inbound() got an unexpected keyword argument 'numconn': did you mean 'num_conn'?"
    with pytest.raises(TypeError) as e:
        scistream.Client("127.0.0.1:1", "cert")  # type: ignore[misc]
    assert str(e.value) == "Client(): too many positional arguments"
    with pytest.raises(TypeError) as e:
        scistream.stream(target=("127.0.0.1", 9), zzz=1)  # type: ignore[call-arg]
    assert str(e.value).startswith("stream() got an unexpected keyword argument 'zzz'; it takes inbound, outbound, target, num_conn")
    with pytest.raises(TypeError, match=r"Client\.inbound\(\) missing receiver_ports=, num_conn="):
        instances["Client"].inbound(remote_ip="127.0.0.1")  # type: ignore[call-overload]


def test_stream_astream_and_spec_take_the_same_arguments() -> None:
    def params(f: Callable[..., Any], skip: tuple[str, ...] = ()) -> list[tuple[str, Any, Any]]:
        return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values() if p.name not in skip]
    spec = params(wiring._Spec.__init__, ("self", "caller"))
    assert params(scistream.stream) == params(scistream.astream)
    # stream's first three may be given by keyword; _Spec's by position.
    assert [(n, d) for n, _, d in params(scistream.stream)[3:]] == [(n, d) for n, _, d in spec[3:]]
    assert [n for n, _, _ in params(scistream.stream)[:3]] == [n for n, _, _ in spec[:3]]
    for f in (scistream.stream, scistream.astream):
        hints = f.__annotations__
        assert all(hints.get(n) not in (None, "Any") for n, _, _ in params(f)), hints
