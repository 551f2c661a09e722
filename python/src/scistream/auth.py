"""Bearer tokens as s2uc finds them: a token file, SCISTREAM_TOKEN, or the
login ``s2uc login`` stored in ``$SCISTREAM_HOME/login.json``.

The stored login is renewed with its refresh token when it expires within a
minute, under the same lock s2uc takes (flock(2) on ``login.json.lock``), so
that s2uc and Python renew it once between them (an issuer that rotates
refresh tokens takes each once). Nothing here prints a token or puts one in
an error.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import os
import ssl
import stat
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional
from urllib.parse import urlsplit

import httpx

from . import _files
from .errors import ConfigError, SciStreamError, printable
from .models import format_time, parse_time

#: How long before its expiry a stored token is renewed (login.Margin).
MARGIN = _dt.timedelta(seconds=60)

#: The most of the identity provider's answer read (bytes), as internal/idp.
MAX_IDP_ANSWER = 1 << 20


def _env(env: Optional[Mapping[str, str]]) -> Mapping[str, str]:
    return os.environ if env is None else env


def home(env: Optional[Mapping[str, str]] = None) -> Path:
    """Where s2uc keeps its files: $SCISTREAM_HOME, or ~/.scistream."""
    env = _env(env)
    if env.get("SCISTREAM_HOME"):
        return Path(env["SCISTREAM_HOME"])
    return Path.home() / ".scistream"


def read_token_file(path: str, what: str = "token_file") -> str:
    """The token of a file only its owner may read or write (as s2uc
    demands of --token_file)."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if stat.S_ISREG(st.st_mode) and st.st_mode & 0o077:
                raise ConfigError(
                    f"{what} {path} can be read or written by others (mode {stat.S_IMODE(st.st_mode):04o}): chmod 600 {path}")
            data = f.read(64 << 10)
    except OSError as e:
        raise ConfigError(f"{what} {path}: {e.strerror}") from None
    tok = data.decode("utf-8", "replace").strip()
    if not tok:
        raise ConfigError(f"{what} {path} is empty")
    return tok


class LoginError(SciStreamError):
    """The stored login cannot be used or renewed; the message says what to
    do (usually: run s2uc login)."""


class NoLogin(LoginError):
    """No login is stored."""


class LoginStore:
    """The login s2uc login stored (a JSON file of mode 0600)."""

    def __init__(self, path: Optional[os.PathLike[str] | str] = None) -> None:
        self.path = Path(path) if path is not None else home() / "login.json"

    def load(self) -> dict[str, Any]:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            raise NoLogin("not logged in") from None
        except OSError as e:
            raise LoginError(f"{self.path}: {e.strerror}") from None
        with os.fdopen(fd, "rb") as f:
            mode = stat.S_IMODE(os.fstat(f.fileno()).st_mode)
            if mode & 0o077:
                raise LoginError(f"{self.path} can be read or written by others (mode {mode:04o}): remove it and run s2uc login again")
            try:
                saved = json.load(f)
            except ValueError:
                saved = None
        if not isinstance(saved, dict) or not saved.get("access_token") or not saved.get("issuer"):
            raise LoginError(f"{self.path} is not a login s2uc saved: remove it and run s2uc login")
        return saved

    def save(self, saved: dict[str, Any]) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(saved, f, indent=2)
        os.replace(tmp, self.path)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """The lock s2uc takes to renew the login: flock(LOCK_EX) on
        login.json.lock, waiting for another holder."""
        try:
            fd = os.open(str(self.path) + ".lock", os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as e:
            raise LoginError(f"lock the login: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    @staticmethod
    def _fresh(saved: dict[str, Any], now: _dt.datetime) -> bool:
        if not saved.get("access_token"):
            return False
        exp = saved.get("expiry")
        if not exp:
            return True
        try:
            t = parse_time(exp)
        except ValueError:
            return False
        return now + MARGIN < t

    def token(self, now: Optional[_dt.datetime] = None, timeout: float = 30.0) -> str:
        """The stored access token, renewed first if it expires within a
        minute. NoLogin if there is none."""
        now = now or _dt.datetime.now(_dt.timezone.utc)
        saved = self.load()
        if self._fresh(saved, now):
            return str(saved["access_token"])
        with self.lock():
            saved = self.load()  # another command may have renewed it
            if self._fresh(saved, now):
                return str(saved["access_token"])
            _refresh(saved, timeout, now)
            try:
                self.save(saved)
            except OSError as e:
                raise LoginError(f"save the renewed login: {e.strerror}") from None
            return str(saved["access_token"])


def _refresh(saved: dict[str, Any], timeout: float, now: _dt.datetime) -> None:
    """Renews saved with its refresh token at its token endpoint (the
    refresh_token grant of a public client: client_id in the form)."""
    issuer = saved.get("issuer", "")
    if not saved.get("refresh_token"):
        raise LoginError(f"your login to {issuer} has expired and holds no refresh token: run s2uc login")
    endpoint = str(saved.get("token_endpoint", ""))
    if urlsplit(endpoint).scheme != "https":
        raise LoginError(f"the login's token_endpoint is not https: run s2uc login")
    ca_file = saved.get("ca_file") or None
    cadata: Optional[str] = None
    if ca_file:
        # It says who the issuer is, to whom the refresh token goes: a file
        # someone else could have written is refused (_files).
        try:
            cadata = _files.read(str(ca_file), "the login's ca_file", 1 << 20).decode("utf-8", "replace")
        except OSError as e:
            raise LoginError(f"the login's ca_file {ca_file}: {e.strerror}") from None
        except ConfigError as e:
            raise LoginError(str(e)) from None
    try:
        ctx = ssl.create_default_context(cadata=cadata)
    except ssl.SSLError:
        raise LoginError(f"the login's ca_file {ca_file} holds no PEM certificate: run s2uc login") from None
    form = {"grant_type": "refresh_token", "refresh_token": saved["refresh_token"], "client_id": saved.get("client_id", "")}
    data = bytearray()
    try:
        with httpx.Client(verify=ctx, timeout=timeout, trust_env=False, follow_redirects=False) as hc:
            # Read as it comes and bounded, as internal/idp reads it.
            with hc.stream("POST", endpoint, data=form, headers={"Accept": "application/json", "Accept-Encoding": "identity"}) as resp:
                cl = resp.headers.get("content-length", "")
                if cl.isdigit() and int(cl) > MAX_IDP_ANSWER:
                    raise LoginError(f"your login to {issuer} could not be renewed (an answer of {cl[:40]} bytes, more than 1 MiB): "
                                     "run s2uc login")
                for chunk in resp.iter_raw():
                    if len(data) + len(chunk) > MAX_IDP_ANSWER:
                        raise LoginError(f"your login to {issuer} could not be renewed (an answer larger than 1 MiB): run s2uc login")
                    data += chunk
    except httpx.HTTPError as e:
        raise LoginError(f"your login to {issuer} could not be renewed ({type(e).__name__}): run s2uc login") from None
    try:
        body = json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        body = {}
    if resp.status_code != 200 or not isinstance(body, dict) or not body.get("access_token"):
        err = body.get("error") if isinstance(body, dict) else None
        code = err if isinstance(err, str) else f"HTTP {resp.status_code}"
        # The provider's text, printable (as every error's).
        raise LoginError(f"your login to {issuer} could not be renewed ({printable(code[:100])}): run s2uc login")
    saved["access_token"] = body["access_token"]
    if body.get("token_type"):
        saved["token_type"] = body["token_type"]
    if body.get("refresh_token"):  # RFC 6749 6: the issuer may keep the old one
        saved["refresh_token"] = body["refresh_token"]
    exp = body.get("expires_in")
    if isinstance(exp, (int, float)) and exp > 0:
        saved["expiry"] = format_time(now + _dt.timedelta(seconds=float(exp)))
    else:
        saved.pop("expiry", None)


def token_source(token: Optional[str] = None, token_file: Optional[str] = None, config_token_file: Optional[str] = None,
                 env: Optional[Mapping[str, str]] = None, login: Optional[LoginStore] = None) -> Callable[[], Optional[str]]:
    """Where a request's bearer token comes from, as s2uc picks it, highest
    first: token; the token_file argument; the configured token file
    (config_token_file: SCISTREAM_TOKEN_FILE, the profile's or the top
    level's token_file, as config.Settings resolves it); SCISTREAM_TOKEN;
    the stored login; else none. A token or a file is read once, here; the
    login is read at each call, so that a long-lived client renews it when
    it is about to expire (as each s2uc command does)."""
    env = _env(env)
    static: Optional[str] = None
    if token:
        static = token
    elif token_file:
        static = read_token_file(token_file)
    elif config_token_file:
        static = read_token_file(config_token_file, "token_file (SCISTREAM_TOKEN_FILE or the configuration file)")
    elif (env.get("SCISTREAM_TOKEN") or "").strip():
        static = (env.get("SCISTREAM_TOKEN") or "").strip()
    if static is not None:
        return lambda: static
    store = login or LoginStore(home(env) / "login.json")

    def from_login() -> Optional[str]:
        try:
            return store.token()
        except NoLogin:
            return None
    from_login()  # a login that cannot be used is said when the client is made
    return from_login


def resolve_token(token: Optional[str] = None, token_file: Optional[str] = None, config_token_file: Optional[str] = None,
                  env: Optional[Mapping[str, str]] = None, login: Optional[LoginStore] = None) -> Optional[str]:
    """The token token_source gives now."""
    return token_source(token, token_file, config_token_file, env, login)()
