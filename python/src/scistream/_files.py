"""Files that grant trust, opened only when no one else could have written
them, under the rule s2uc and s2cs apply (internal/trustfile): the
configuration file (it names the gateways), a pinned server_cert (it says
which certificate is the gateway's), the local records of streams and
their directory (s2uc status and release reach the gateways they name,
with the user's token), the login's ca_file.

Such a file must be owned by the user or root and writable by nobody
else, and so must every directory its name is looked up in on the way to
it, along every symlink. The error names the path, what is wrong and the
chmod or chown that fixes it. The file is judged as opened (fstat of the
descriptor), and its name, resolved, must still be the file opened.

Three cases pass although a mode bit says "writable by others":

- a directory with the sticky bit (/tmp, a Kubernetes Secret's tmpfs):
  others may add names to it but not replace another's, so a name in it
  owned by the user or root cannot be replaced (the directory itself must
  be owned by one of them); a symlink in one must be owned by one of them
  too;
- a directory on a read-only mount (Kubernetes mounts a ConfigMap so, in
  a directory of mode 0777): nobody changes a name through it; the file's
  own mode still counts;
- anything that is not a regular file once opened (a pipe, /dev/stdin):
  its mode says nothing of who else writes it.
"""

from __future__ import annotations

import os
import pwd
import stat

from .errors import ConfigError

#: The most symlinks followed from a path (the kernel's own limit).
MAX_LINKS = 40

_WRITABLE = 0o022


def _trusted(uid: int) -> bool:
    return uid in (0, os.geteuid())


def _user_name(uid: int) -> str:
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
    return f"uid {uid} ({name})" if name else f"uid {uid}"


def _owners() -> str:
    uid = os.geteuid()
    if uid == 0:
        return "root, the running user"
    return f"the running user, {_user_name(uid)}, or root"


def _chown_fix(path: str, other: str) -> str:
    uid = os.geteuid()
    try:
        who = pwd.getpwuid(uid).pw_name
    except KeyError:
        who = str(uid)
    return f"chown {who} {path}, or {other}"


def _read_only(d: str) -> bool:
    try:
        return bool(os.statvfs(d).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _lookup_dir(what: str, path: str, d: str) -> bool:
    """Applies the rule to d, a directory a name on the way to path is
    looked up in; reports whether others may add names to it (sticky)."""
    try:
        st = os.stat(d)
    except FileNotFoundError:
        return False  # nothing in it yet to trust; it is checked once made
    except OSError as e:
        raise ConfigError(f"{what} {path}: directory {d}: {e.strerror}") from None
    subject = f"{what} {d}" if d == path else f"{what} {path}: directory {d}"
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{subject} is not a directory")
    if not _trusted(st.st_uid):
        raise ConfigError(f"{subject} is owned by {_user_name(st.st_uid)}, not by {_owners()}, who could put another "
                          f"file in place of what is in it: {_chown_fix(d, 'keep the file in a directory of your own')}")
    if st.st_mode & _WRITABLE == 0 or _read_only(d):
        return False
    if st.st_mode & stat.S_ISVTX:
        return True
    raise ConfigError(f"{subject} can be written by other users (mode {stat.S_IMODE(st.st_mode):04o}), who could put "
                      f"another file in place of what is in it: chmod go-w {d}")


def _walk(what: str, path: str) -> str:
    """Resolves path as the kernel would, applying the rule to every
    directory a name is looked up in and to every symlink found in a
    sticky one; returns the resolved path."""
    todo = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    rest = todo.split("/")
    d = "/"
    checked: dict[str, bool] = {}
    links = 0
    while rest:
        name = rest.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            d = os.path.dirname(d)
            continue
        if d not in checked:
            checked[d] = _lookup_dir(what, path, d)
        sticky = checked[d]
        p = os.path.join(d, name)
        try:
            st = os.lstat(p)
        except OSError:
            return p
        if not stat.S_ISLNK(st.st_mode):
            d = p
            continue
        if sticky and not _trusted(st.st_uid):
            raise ConfigError(f"{what} {path}: the symbolic link {p}, in directory {d}, which others may write (sticky: "
                              f"each name there is its owner's), is owned by {_user_name(st.st_uid)}, who could point it "
                              f"elsewhere: name the file itself, or make the link yourself")
        links += 1
        if links > MAX_LINKS:
            raise ConfigError(f"{what} {path}: more than {MAX_LINKS} symbolic links on the way to it")
        target = os.readlink(p)
        if os.path.isabs(target):
            d = "/"
        rest = target.split("/") + rest
    return d


def check_stat(st: os.stat_result, what: str, path: str) -> None:
    """Refuses what at path, as st says it is, when someone other than
    the user or root owns it or group or others can write it."""
    if not _trusted(st.st_uid):
        raise ConfigError(f"{what} {path} is owned by {_user_name(st.st_uid)}, not by {_owners()}, and its owner can "
                          f"change it: {_chown_fix(path, 'use a copy of your own')}")
    if st.st_mode & _WRITABLE:
        raise ConfigError(f"{what} {path} can be written by other users (mode {stat.S_IMODE(st.st_mode):04o}): "
                          f"chmod go-w {path}")


def check_open(fd: int, path: str, what: str) -> None:
    """Refuses the file open at fd (path, what) under the rule; a file
    that is not a regular one is left alone."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return
    check_stat(st, what, path)
    final = _walk(what, path)
    try:
        now = os.lstat(final)
    except OSError:
        now = None
    if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        raise ConfigError(f"{what} {path} changed while it was being checked (it now resolves to {final}, another "
                          f"file): check who else writes there, and start again")


def read(path: str, what: str, limit: int) -> bytes:
    """The first limit bytes of the file at path, checked (check_open).
    OSError when it cannot be opened or read."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        check_open(f.fileno(), path, what)
        return f.read(limit)


def make_dirs(path: str) -> None:
    """Makes directory path and the missing ones above it, each 0700 (not
    as the umask leaves them, which check_dir may then refuse)."""
    missing = []
    d = os.path.abspath(path)
    while not os.path.isdir(d):
        missing.append(d)
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass


def check_dir(path: str, what: str) -> None:
    """Applies the rule of the directories on the way to a trust file to
    the directory path (what) and to those on the way to it. A directory
    that does not exist yet is no error (nothing is in it)."""
    final = _walk(what, path)
    _lookup_dir(what, path, final)
