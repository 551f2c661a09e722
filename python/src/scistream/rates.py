"""Bit rates as people write them, as s2uc --rate reads them (pace.ParseRate):
a non-negative number, an optional decimal prefix k, M, G or T, and an
optional unit bit/s, b/s or bps (bits, the default) or B/s (bytes). "2G" and
"2Gbit/s" are two gigabits per second, "100MB/s" is 800 Mbit/s."""

from __future__ import annotations

from fractions import Fraction
from typing import Union

from .errors import ConfigError

MAX = 10_000_000_000_000  # 10 Tbit/s, api's Rate maximum
_PREFIXES = {"": 1, "k": 10**3, "K": 10**3, "m": 10**6, "M": 10**6, "g": 10**9, "G": 10**9, "t": 10**12, "T": 10**12}


def parse_rate(s: Union[str, int], what: str = "rate") -> int:
    """The rate s in bits per second; an int is taken as such. ConfigError
    names what and says how to write one."""
    if isinstance(s, bool):
        raise ConfigError(f"{what} {s!r}: give bits per second, e.g. 800M or 10Gbit/s")
    if isinstance(s, int):
        if s < 0 or s > MAX:
            raise ConfigError(f"{what} {s}: give 0 to {MAX} bits per second")
        return s
    t = s.strip()
    i = 0
    while i < len(t) and (t[i].isdigit() and t[i].isascii() or t[i] == "."):
        i += 1
    num, rest = t[:i], t[i:].strip()

    def bad(why: str) -> ConfigError:
        return ConfigError(f"{what} {s[:40]!r}: {why}; write bits per second with an optional prefix k, M, G or T, "
                           "e.g. 800M or 10Gbit/s (or bytes: 100MB/s)")

    if not num:
        raise bad("no number")
    bits = 1
    for suffix, b in (("bit/s", 1), ("bps", 1), ("b/s", 1), ("B/s", 8)):
        if rest.endswith(suffix):
            rest, bits = rest[: -len(suffix)], b
            break
    if rest not in _PREFIXES:
        raise bad(f"unknown unit {rest!r}")
    if num.count(".") > 1 or num == ".":
        raise bad("not a number")
    r = Fraction(num) * _PREFIXES[rest] * bits
    if r.denominator != 1:
        raise bad("not a whole number of bits per second")
    if r > MAX:
        raise bad("more than 10 Tbit/s")
    return int(r)


def format_rate(bps: float) -> str:
    """A rate in bits per second for people: "2 Gbit/s", "812.5 Mbit/s"."""
    if bps <= 0:
        return "0 bit/s"
    for name, mult in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= mult:
            return f"{bps / mult:.4g} {name}"
    return f"{bps:.0f} bit/s"
