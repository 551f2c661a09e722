"""The Python side against the OpenAPI document: every model against its
schema (field names, types, which are required), every operation against
ROUTES, every error code against its exception class. A field, route or code
added to openapi.yaml and not here (or the reverse) fails these tests."""

from __future__ import annotations

import dataclasses
import datetime as dt
import types
import typing
from pathlib import Path
from typing import Any, Optional, Union

import pytest
import yaml

import scistream
from scistream import errors, models
from scistream.client import ROUTES

from conftest import REPO

DOC = yaml.safe_load((REPO / "internal/api/openapi.yaml").read_text())
SCHEMAS: dict[str, Any] = DOC["components"]["schemas"]
# Schemas that are no model: enums and scalars (their fields' types are
# checked where they are used), and the error body, which is the errors
# module's (test_codes below).
NOT_MODELS = {"Rate", "UID", "WAN", "Engine", "Role", "State", "Code", "ErrorBody", "Error"}


def _resolve(s: dict[str, Any]) -> dict[str, Any]:
    """A property schema with allOf [$ref] and $ref to scalars resolved."""
    if "allOf" in s and len(s["allOf"]) == 1:
        s = {**s["allOf"][0], **{k: v for k, v in s.items() if k != "allOf"}}
    ref = s.get("$ref")
    if ref:
        name = ref.rsplit("/", 1)[1]
        target = SCHEMAS[name]
        if target.get("type") == "object":
            return {"model": name}
        return {**target, **{k: v for k, v in s.items() if k != "$ref"}}
    return s


def expected_type(s: dict[str, Any]) -> Any:
    """The Python type a property schema stands for."""
    s = _resolve(s)
    if "model" in s:
        return getattr(models, s["model"])
    t = s.get("type")
    if t == "integer":
        return int
    if t == "number":
        return float
    if t == "boolean":
        return bool
    if t == "string":
        return dt.datetime if s.get("format") == "date-time" else str
    if t == "array":
        return list[expected_type(s["items"])]  # type: ignore[misc]
    if t == "object" and "additionalProperties" in s:
        return dict[str, expected_type(s["additionalProperties"])]  # type: ignore[misc]
    raise AssertionError(f"no Python type for schema {s}")


def _optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


MODEL_SCHEMAS = sorted(n for n, s in SCHEMAS.items() if n not in NOT_MODELS)


def test_every_schema_has_a_model_and_every_model_a_schema() -> None:
    model_names = {n for n in models.__all__ if isinstance(getattr(models, n), type)}
    assert model_names == set(MODEL_SCHEMAS)


@pytest.mark.parametrize("name", MODEL_SCHEMAS)
def test_model_matches_schema(name: str) -> None:
    schema = SCHEMAS[name]
    cls = getattr(models, name)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    props = schema.get("properties", {})
    assert set(fields) == set(props), f"{name}: fields differ from the schema's properties"
    required = set(schema.get("required", []))
    for fname, prop in props.items():
        tp, optional = _optional(hints[fname])
        assert tp == expected_type(prop), f"{name}.{fname}: {tp} but the schema says {expected_type(prop)}"
        if fname in required:
            assert not optional and fields[fname].default is dataclasses.MISSING, f"{name}.{fname} is required"
        else:
            assert optional and fields[fname].default is None, f"{name}.{fname} is optional: Optional[...] = None"


def test_routes_are_the_operations() -> None:
    ops = {(m, p) for p, item in DOC["paths"].items() for m in item if m in ("get", "post", "put", "patch", "delete")}
    assert set(ROUTES) == ops
    for name in set(ROUTES.values()):
        assert callable(getattr(scistream.Client, name)) and callable(getattr(scistream.AsyncClient, name))


def test_codes_are_the_enum() -> None:
    enum = SCHEMAS["Code"]["enum"]
    assert set(errors.CODES) == set(enum)
    # Each class maps its code to the HTTP status the document gives it.
    status = {}
    for resp in DOC["components"]["responses"].values():
        code = resp.get("x-error-code")
        if code:
            status[code] = resp
    assert set(status) == set(enum), "every code has a response in components.responses"
    for code, cls in errors.CODES.items():
        assert cls.code == code and issubclass(cls, scistream.APIError)
        e = errors.api_error(code, "m", status=400, request_id="rid", gateway="gw")
        assert type(e) is cls and e.request_id == "rid" and "rid" in str(e)
    # An unknown code is still an APIError with its code.
    e = errors.api_error("brand_new", "m")
    assert type(e) is scistream.APIError and e.code == "brand_new"


def test_code_statuses_as_documented() -> None:
    """Each code's status in the document's operations: the response of
    status N refers to the code's response."""
    want = {"invalid_argument": "400", "unauthenticated": "401", "permission_denied": "403", "not_found": "404",
            "conflict": "409", "unavailable": "503", "no_resources": "507", "internal": "500"}
    refs = {n: r["x-error-code"] for n, r in DOC["components"]["responses"].items()}
    for item in DOC["paths"].values():
        for op in item.values():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            for status, r in op["responses"].items():
                if "$ref" in r:
                    assert want[refs[r["$ref"].rsplit("/", 1)[1]]] == status
    assert set(want) == set(errors.CODES)


def test_served_document_is_the_file(pair: Any) -> None:
    """GET /v1/openapi.yaml (the route the models are checked against) is
    the document of the repository these tests read."""
    with pair.client(pair.cons) as c:
        assert c.openapi() == DOC


def test_decode_refuses_wrong_types() -> None:
    with pytest.raises(ValueError, match="Channel.channel"):
        models.from_json(models.Channel, {"channel": "0", "listener": "a:1"})
    with pytest.raises(ValueError, match="listener"):
        models.from_json(models.Channel, {"channel": 0})
    t = models.parse_time("2026-11-27T17:53:42.273029123Z")
    assert t == dt.datetime(2026, 11, 27, 17, 53, 42, 273029, tzinfo=dt.timezone.utc)


def test_request_encoding_omits_absent_fields() -> None:
    assert models.to_json(models.UpdateRequest(rate=0)) == {"rate": 0}
    assert models.to_json(models.AttachRequest()) == {}
