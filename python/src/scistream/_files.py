"""Files that grant trust, opened only when no one else could have written
them, as s2uc opens them: the configuration file (it names the gateways),
a pinned server_cert (it says which certificate is the gateway's), the
local records of streams and their directory (s2uc status and release
reach the gateways they name, with the user's token).

Such a file is refused when group or others can write it, or the
directory it is looked up in, or a directory along its symlink chain, or
when one of them belongs to someone other than the user or root; the
error names the path and the chmod or chown that fixes it. The file is
checked as opened (fstat on the descriptor); one that is not a regular
file (a pipe, /dev/stdin) is left alone.
"""

from __future__ import annotations

import os
import pwd
import stat

from .errors import ConfigError

#: The most symlinks followed from a path (the kernel's own limit).
MAX_LINKS = 40


def _me() -> str:
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def check_stat(st: os.stat_result, what: str, path: str, of: str = "") -> None:
    """Refuses what at path (of: what it holds, for a directory), as st
    says it is, when group or others can write it or when it belongs to
    someone other than the user or root."""
    name = f"{what} {path}" + (f" (of {of})" if of else "")
    if st.st_mode & 0o022:
        raise ConfigError(f"{name} can be written by other users (mode {stat.S_IMODE(st.st_mode):04o}): chmod go-w {path}")
    if st.st_uid not in (os.getuid(), 0):
        raise ConfigError(f"{name} is owned by {_owner(st.st_uid)}, not by you or root: chown {_me()} {path}")


def _dir(d: str, of: str) -> None:
    d = d or "."
    try:
        st = os.stat(d)
    except FileNotFoundError:
        return  # nothing in it yet to trust; it is checked once made
    except OSError as e:
        raise ConfigError(f"directory {d} (of {of}): {e.strerror}") from None
    check_stat(st, "directory", d, of)


def check_dirs(path: str, what: str) -> None:
    """Checks the directory path is looked up in and, while path is a
    symlink, the directory of each link's target (check_stat); what names
    path in the error."""
    of = f"{what} {path}"
    cur = path
    for _ in range(MAX_LINKS):
        d = os.path.dirname(cur)
        _dir(d, of)
        try:
            st = os.lstat(cur)
        except OSError:
            return  # the open said, or will say, what is wrong
        if not stat.S_ISLNK(st.st_mode):
            return
        try:
            cur = os.path.join(d, os.readlink(cur))
        except OSError:
            return
    raise ConfigError(f"{of}: more than {MAX_LINKS} symlinks")


def check_open(fd: int, path: str, what: str) -> None:
    """Refuses the file open at fd (path, what) as check_stat does, and the
    directories check_dirs checks; a file that is not a regular one is
    left alone."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return
    check_stat(st, what, path)
    check_dirs(path, what)


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
    """Refuses the directory path (what) as check_stat does, and the
    directories check_dirs checks for it. A directory that does not exist
    is no error (nothing is in it)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        check_dirs(path, what)  # where it will be made
        return
    except OSError as e:
        raise ConfigError(f"{what} {path}: {e.strerror}") from None
    check_stat(st, what, path)
    check_dirs(path, what)
