"""The client configuration file and its profiles, shared with s2uc.

File: ``$SCISTREAM_CONFIG`` if set; else ``$SCISTREAM_HOME/config.yaml`` if
SCISTREAM_HOME is set; else ``$XDG_CONFIG_HOME/scistream/config.yaml``
(XDG_CONFIG_HOME defaulting to ~/.config). A missing file is no error; a file
others can write, or an unknown key, is.

Top-level keys are the defaults; ``profiles:`` maps a name to the same keys,
selected by ``profile=`` (s2uc ``--profile``), else ``SCISTREAM_PROFILE``,
else the top-level ``profile:`` key. Precedence, highest first: the explicit
argument; the environment (SCISTREAM_S2CS, SCISTREAM_SERVER_CERT,
SCISTREAM_TOKEN_FILE, SCISTREAM_OUTPUT; SCISTREAM_TOKEN for the token
itself); the selected profile; the top-level defaults. Side-specific keys
(inbound_*, outbound_*) fall back to the plain key.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import stat
from pathlib import Path
from typing import Mapping
from typing import Any, Literal, Optional

import yaml

from .errors import ConfigError

Side = Optional[Literal["inbound", "outbound"]]

#: The keys of a profile (and of the top level, with profile and profiles).
PLAIN_KEYS = ("s2cs", "server_cert", "token_file", "output")
SIDE_KEYS = tuple(f"{side}_{k}" for side in ("inbound", "outbound") for k in ("s2cs", "server_cert", "token_file"))
PROFILE_KEYS = PLAIN_KEYS + SIDE_KEYS
TOP_KEYS = ("profile", "profiles") + PROFILE_KEYS

ENV = {"s2cs": "SCISTREAM_S2CS", "server_cert": "SCISTREAM_SERVER_CERT", "token_file": "SCISTREAM_TOKEN_FILE", "output": "SCISTREAM_OUTPUT"}


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


def _unknown(path: Path, key: str, known: tuple[str, ...], where: str) -> ConfigError:
    near = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {near[0]}?" if near else f"; known keys: {', '.join(known)}"
    return ConfigError(f"{path}: unknown key {key!r}{where}{hint} (fix or remove it)")


def _check_keys(path: Path, d: Any, known: tuple[str, ...], where: str) -> dict[str, Any]:
    if d is None:
        return {}
    if not isinstance(d, dict):
        raise ConfigError(f"{path}:{where or ' top level'}: want a mapping of keys to values")
    for k, v in d.items():
        if k not in known:
            raise _unknown(path, str(k), known, where)
        if k != "profiles" and v is not None and not isinstance(v, (str, int)):
            raise ConfigError(f"{path}: key {k!r}{where}: want a string, got {type(v).__name__}")
    return d


@dataclasses.dataclass
class Settings:
    """What the configuration (file, environment) says of one gateway.
    Fields are None when nothing sets them. token_file is the file's only
    (auth.resolve_token puts SCISTREAM_TOKEN_FILE and SCISTREAM_TOKEN above
    it)."""

    s2cs: Optional[str] = None
    server_cert: Optional[str] = None
    token_file: Optional[str] = None
    output: Optional[str] = None
    profile: Optional[str] = None
    source: Optional[Path] = None


class Config:
    """A loaded configuration file (or none): ``settings(side, profile)``
    resolves what one gateway's client uses below the explicit arguments."""

    def __init__(self, path: Optional[Path], data: dict[str, Any], env: Optional[Mapping[str, str]] = None) -> None:
        self.path = path
        self._data = data
        self._env = dict(os.environ if env is None else env)

    @classmethod
    def load(cls, path: Optional[os.PathLike[str] | str] = None, env: Optional[Mapping[str, str]] = None) -> "Config":
        """Reads the configuration file (path, or config_path()). A missing
        file gives an empty configuration."""
        p = Path(path) if path is not None else config_path(env)
        try:
            st = p.stat()
        except FileNotFoundError:
            return cls(None, {}, env)
        except OSError as e:
            raise ConfigError(f"{p}: {e.strerror}") from None
        if st.st_mode & 0o022:
            raise ConfigError(f"{p} can be written by others (mode {stat.S_IMODE(st.st_mode):04o}): chmod go-w {p}")
        try:
            raw = yaml.safe_load(p.read_text())
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not YAML: {e}") from None
        data = _check_keys(p, raw, TOP_KEYS, "")
        profiles = data.get("profiles") or {}
        if not isinstance(profiles, dict):
            raise ConfigError(f"{p}: profiles: want a mapping of profile names to keys")
        for name, prof in profiles.items():
            _check_keys(p, prof, PROFILE_KEYS, f" in profile {name!r}")
        for name, prof in [("", data)] + list(profiles.items()):
            o = (prof or {}).get("output")
            if o is not None and o not in ("text", "json"):
                where = f" in profile {name!r}" if name else ""
                raise ConfigError(f"{p}: output{where}: {o!r}: use text or json")
        return cls(p, data, env)

    def profile_name(self, profile: Optional[str] = None) -> Optional[str]:
        """The selected profile: the argument, SCISTREAM_PROFILE, or the
        file's profile key."""
        return profile or self._env.get("SCISTREAM_PROFILE") or self._data.get("profile") or None

    def _profile(self, profile: Optional[str]) -> dict[str, Any]:
        name = self.profile_name(profile)
        if not name:
            return {}
        profiles = self._data.get("profiles") or {}
        if name not in profiles:
            known = ", ".join(sorted(profiles)) or "none"
            where = str(self.path) if self.path else f"no configuration file ({config_path(self._env)})"
            raise ConfigError(f"unknown profile {name!r} in {where}: known profiles: {known}")
        return profiles[name] or {}

    def _path(self, key: str, value: Optional[str]) -> Optional[str]:
        """A path from the file: ~ expanded; server_cert relative to the file's directory."""
        if value is None:
            return None
        v = os.path.expanduser(str(value))
        if key == "server_cert" and self.path is not None and not os.path.isabs(v):
            v = str(self.path.parent / v)
        return v

    def settings(self, side: Side = None, profile: Optional[str] = None) -> Settings:
        """What environment, profile and defaults say of one gateway (side
        "inbound" or "outbound" for one side of a stream; None for a
        single-gateway command)."""
        prof = self._profile(profile)
        out = Settings(profile=self.profile_name(profile), source=self.path)
        for key in PLAIN_KEYS:
            val: Optional[str] = None
            # SCISTREAM_TOKEN_FILE is read with SCISTREAM_TOKEN, in
            # auth.resolve_token: both sit above the file's token_file.
            env = None if key == "token_file" else (self._env.get(ENV[key]) or None)
            if env is not None:
                val = env
            else:
                names = ([f"{side}_{key}"] if side and key != "output" else []) + [key]
                for layer in (prof, self._data):
                    found = next((layer[n] for n in names if layer.get(n) is not None), None)
                    if found is not None:
                        val = self._path(key, str(found)) if key in ("server_cert", "token_file") else str(found)
                        break
                # The profile's side-specific key beats its plain key; both
                # beat the top-level keys.
            setattr(out, key, val)
        return out
