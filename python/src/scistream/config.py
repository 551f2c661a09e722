"""The client configuration file and its profiles, shared with s2uc
(docs/client.md; s2uc's side is internal/client/defaults.go, and a test runs
both on the same files).

File: ``$SCISTREAM_CONFIG`` if set; else ``$SCISTREAM_HOME/config.yaml`` if
SCISTREAM_HOME is set; else ``$XDG_CONFIG_HOME/scistream/config.yaml``
(XDG_CONFIG_HOME defaulting to ~/.config). A missing file is no error (but
one SCISTREAM_CONFIG names is: a mistyped name must not pass for none); a file
that group or others can write or another user owns, or in a directory they
can write (scistream._files: the chmod or chown to run is said), an unknown
key (the nearest known one suggested), a key given twice or a value that is
not one string is, naming the file and line.

Top-level keys are the defaults; ``profiles:`` maps a name to the same keys,
selected by ``profile=`` (s2uc ``--profile``), else ``SCISTREAM_PROFILE``,
else the top-level ``profile:`` key. Precedence, highest first: the explicit
argument; the environment (SCISTREAM_S2CS, SCISTREAM_SERVER_CERT,
SCISTREAM_TOKEN_FILE, SCISTREAM_OUTPUT); the selected profile; the top-level
keys. Environment, profile and top level are merged key by key first; then a
side-specific key (inbound_*, outbound_*) that is unset falls back to the
plain key. SCISTREAM_TOKEN is used when no token file is given at all.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

import yaml

from . import _files
from .errors import ConfigError

Side = Optional[Literal["inbound", "outbound"]]

GATEWAY_KEYS = ("s2cs", "server_cert", "token_file")
#: The keys of a profile (and of the top level, with profile and profiles).
PROFILE_KEYS = ("output",) + tuple(p + k for p in ("", "inbound_", "outbound_") for k in GATEWAY_KEYS)
TOP_KEYS = ("profile", "profiles") + PROFILE_KEYS

ENV = (("SCISTREAM_S2CS", "s2cs"), ("SCISTREAM_SERVER_CERT", "server_cert"),
       ("SCISTREAM_TOKEN_FILE", "token_file"), ("SCISTREAM_OUTPUT", "output"))

_EXAMPLE = {"s2cs": "10.0.0.5:5000", "server_cert": "/etc/scistream/gw.crt", "token_file": "~/.scistream/token", "output": "text"}


def _env(env: Optional[Mapping[str, str]]) -> Mapping[str, str]:
    return os.environ if env is None else env


def config_path(env: Optional[Mapping[str, str]] = None) -> Path:
    """The configuration file's path (it may not exist)."""
    env = _env(env)
    if env.get("SCISTREAM_CONFIG"):
        return Path(env["SCISTREAM_CONFIG"])
    if env.get("SCISTREAM_HOME"):
        return Path(env["SCISTREAM_HOME"]) / "config.yaml"
    xdg = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(xdg) / "scistream" / "config.yaml"


def _example(key: str) -> str:
    for suffix, ex in _EXAMPLE.items():
        if key.endswith(suffix):
            return ex
    return "ornl"


def _scalars(m: yaml.MappingNode, keys: tuple[str, ...], where: str) -> dict[str, str]:
    """The string keys of mapping m, strictly: an unknown key, a key given
    twice, a value that is not one scalar are errors."""
    out: dict[str, str] = {}
    for k, v in m.value:
        name = str(k.value)
        line = k.start_mark.line + 1
        if name not in keys:
            near = difflib.get_close_matches(name, keys, n=1)
            hint = f"; did you mean {near[0]}?" if near else f"; the keys are {', '.join(keys)}"
            raise ValueError(f"line {line}: {where}{name}: unknown key{hint}")
        if name in out:
            raise ValueError(f"line {line}: {where}{name} is given twice")
        if not isinstance(v, yaml.ScalarNode) or v.tag == "tag:yaml.org,2002:null":
            raise ValueError(f"line {v.start_mark.line + 1}: {where}{name}: want one value, e.g. {name}: {_example(name)}")
        out[name] = str(v.value)
    return out


def parse(text: str) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """The top level's keys and each profile's, of a configuration file's
    text; ValueError says what is wrong and on which line."""
    try:
        doc = yaml.compose(text)
    except yaml.YAMLError as e:
        raise ValueError(f"not YAML: {e}") from None
    top: dict[str, str] = {}
    profiles: dict[str, dict[str, str]] = {}
    if doc is None:
        return top, profiles  # empty, or comments only
    if not isinstance(doc, yaml.MappingNode):
        raise ValueError(f"line {doc.start_mark.line + 1}: want keys such as s2cs: HOST:PORT")
    rest = yaml.MappingNode(doc.tag, [])
    seen_profiles = False
    for k, v in doc.value:
        if k.value != "profiles":
            rest.value.append((k, v))
            continue
        if seen_profiles:
            raise ValueError(f"line {k.start_mark.line + 1}: profiles is given twice")
        seen_profiles = True
        if not isinstance(v, yaml.MappingNode):
            raise ValueError(f"line {v.start_mark.line + 1}: profiles: want a name for each profile, and its keys under it")
        for name, body in v.value:
            if name.value in profiles:
                raise ValueError(f"line {name.start_mark.line + 1}: profile {name.value!r} is given twice")
            if not isinstance(body, yaml.MappingNode):
                raise ValueError(f"line {body.start_mark.line + 1}: profile {name.value!r}: want its keys (s2cs: ..., server_cert: ...) under it")
            profiles[str(name.value)] = _scalars(body, PROFILE_KEYS, f"profile {name.value}: ")
    top = _scalars(rest, TOP_KEYS[:1] + TOP_KEYS[2:], "")
    return top, profiles


def _file_path(cfg: Optional[Path], p: str) -> str:
    """A path of the file at cfg: ~ and ~/ are the home directory; a
    relative path is relative to the file's directory."""
    if p == "~" or p.startswith("~/"):
        return str(Path.home() / p[2:]) if p != "~" else str(Path.home())
    if not p or os.path.isabs(p) or cfg is None:
        return p
    return str(cfg.parent / p)


@dataclasses.dataclass
class Settings:
    """What the configuration (environment, file) gives one gateway. Fields
    are None when nothing sets them."""

    s2cs: Optional[str] = None
    server_cert: Optional[str] = None
    token_file: Optional[str] = None
    output: Optional[str] = None
    profile: Optional[str] = None
    source: Optional[Path] = None


class Config:
    """A loaded configuration file (or none) and the environment:
    ``settings(side, profile)`` resolves what one gateway's client uses
    below the explicit arguments."""

    def __init__(self, path: Optional[Path], top: dict[str, str], profiles: dict[str, dict[str, str]],
                 env: Optional[Mapping[str, str]] = None) -> None:
        self.path = path
        self._top = top
        self._profiles = profiles
        # Only the variables it reads: not SCISTREAM_TOKEN nor any other
        # secret of the environment.
        self._env = {k: v for k, v in _env(env).items() if k == "SCISTREAM_PROFILE" or k in dict(ENV)}

    @classmethod
    def load(cls, path: Optional[os.PathLike[str] | str] = None, env: Optional[Mapping[str, str]] = None) -> "Config":
        """Reads the configuration file (path, or config_path(env)). A
        missing file gives an empty configuration, unless SCISTREAM_CONFIG
        names it (and path is not given): that is a ConfigError naming the
        variable, as s2uc's."""
        p = Path(path) if path is not None else config_path(env)
        named = path is None and bool(_env(env).get("SCISTREAM_CONFIG"))
        try:
            with open(p, "rb") as f:
                # It names the gateways the token goes to: no one else may
                # have written it (_files).
                _files.check_open(f.fileno(), str(p), "configuration file")
                text = f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            if named:
                raise ConfigError(f"SCISTREAM_CONFIG names {p}, which does not exist: correct it, or unset SCISTREAM_CONFIG "
                                  "for the file in its usual place (docs/client.md)") from None
            return cls(None, {}, {}, env)
        except OSError as e:
            raise ConfigError(f"configuration file: {p}: {e.strerror}") from None
        try:
            top, profiles = parse(text)
        except ValueError as e:
            raise ConfigError(f"configuration file {p}: {e}") from None
        return cls(p, top, profiles, env)

    def profile_name(self, profile: Optional[str] = None) -> Optional[str]:
        """The selected profile: the argument, SCISTREAM_PROFILE, or the
        file's profile key."""
        return profile or self._env.get("SCISTREAM_PROFILE") or self._top.get("profile") or None

    def _merged(self, profile: Optional[str]) -> dict[str, str]:
        name = self.profile_name(profile)
        merged = {k: v for k, v in self._top.items() if k != "profile"}
        if name:
            if name not in self._profiles:
                where = f"configuration file {self.path}: " if self.path else ""
                if not self._profiles:
                    raise ConfigError(f"{where}unknown profile {name!r}: the file defines none (add it under profiles:, "
                                      "or drop profile=, SCISTREAM_PROFILE or the profile key)")
                raise ConfigError(f"{where}unknown profile {name!r}: give one of {', '.join(sorted(self._profiles))}")
            merged.update(self._profiles[name])
        for k, v in merged.items():
            if k.endswith("server_cert") or k.endswith("token_file"):
                merged[k] = _file_path(self.path, v)
        for env, key in ENV:  # the environment's are taken as given, as an argument's
            if self._env.get(env):
                merged[key] = self._env[env]
        out = merged.get("output")
        if out and out not in ("text", "json"):
            where = f"configuration file {self.path}: " if self.path else ""
            raise ConfigError(f"{where}output {out!r}: use text or json")
        return merged

    def settings(self, side: Side = None, profile: Optional[str] = None) -> Settings:
        """What environment, profile and top level give one gateway: side
        "inbound" or "outbound" for one side of a stream (its own keys,
        each falling back to the plain key), None for a single gateway."""
        merged = self._merged(profile)
        prefix = f"{side}_" if side else ""

        def get(k: str) -> Optional[str]:
            return merged.get(prefix + k) or merged.get(k) or None
        return Settings(s2cs=get("s2cs"), server_cert=get("server_cert"), token_file=get("token_file"),
                        output=merged.get("output") or None, profile=self.profile_name(profile), source=self.path)
