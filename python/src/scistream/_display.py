"""How the models show themselves: a one-line repr and a small HTML table
for notebooks (``_repr_html_``).

Units, as the gateway counts them: a reserved rate (``rate``, ``min_rate``)
is in bits per second, as it was asked for ("50M" is 50 Mbit/s, 6.25 MB/s);
a sampled rate (``rate_to_wan_Bps``, a RateSample) is in bytes per second:
the bytes the gateway carried in one sampling interval (``rates.interval_s``,
s2cs --rate_interval, 1 s by default) over that interval. The pacer lets 50
ms of the rate pass at once, so one short sample can be above the
reservation while the mean over the run keeps to it.

Everything a gateway sent (a reason, a listener, an owner) is text of the
gateway's: in a repr it is a Python string literal (repr escapes what is not
printable), in HTML every value is escaped (html.escape), so no answer can
put markup or script into a notebook. No secret is shown: the displays name
the fields they show, and a secret or certificate is none of them.
"""

from __future__ import annotations

import datetime as _dt
import html
from typing import Any, Iterable, Optional, Sequence

from .errors import printable
from .rates import format_rate

#: The sentence every display of rates carries.
UNITS = ("Reserved rates are bits per second (50 Mbit/s = 6.25 MB/s); sampled rates are bytes per second: "
         "the bytes the gateway carried in one sampling interval over its length, so one sample can be above "
         "the reservation by a burst of the pacing while the mean keeps to it.")

MAX_TEXT = 80


def short(s: Any, n: int = MAX_TEXT) -> str:
    """s as text, cut to n characters ("…" marks a cut)."""
    t = str(s)
    return t if len(t) <= n else t[: n - 1] + "…"


def nbytes(n: float) -> str:
    """A byte count for people, in decimal units: "8.39 MB"."""
    for name, mult in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= mult:
            return f"{n / mult:.3g} {name}"
    return f"{n:.0f} B"


def bytes_rate(bps: float) -> str:
    """A sampled rate (bytes per second) for people: "6.25 MB/s"."""
    return nbytes(bps) + "/s"


def bits_rate(bps: Optional[int]) -> str:
    """A reserved rate (bits per second) for people: "50 Mbit/s"; none:
    "best effort"."""
    return format_rate(bps) if bps else "best effort"


def when(t: Optional[_dt.datetime]) -> str:
    """A time of the gateway's, to the second, in UTC."""
    if t is None:
        return ""
    return t.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


#: The fields of a one-line repr that may be longer: a gateway's reason.
LONG_FIELDS = {"reason": 200, "last_error": 200}


def one_line(name: str, fields: Iterable[tuple[str, Any]]) -> str:
    """name(k=v, ...): strings as literals (repr escapes what is not
    printable), cut to MAX_TEXT (a reason to 200); fields whose value is
    None are left out."""
    parts = []
    for k, v in fields:
        if v is None:
            continue
        parts.append(f"{k}={short(v, LONG_FIELDS.get(k, MAX_TEXT))!r}" if isinstance(v, str) else f"{k}={v!r}")
    return f"{name}({', '.join(parts)})"


def e(v: Any) -> str:
    """v as HTML text: printable (errors.printable: no control or bidi
    character) and escaped (html.escape: no markup)."""
    return html.escape(printable(str(v)), quote=True)


def table(title: str, rows: Sequence[tuple[str, Any]], note: str = "") -> str:
    """A small HTML table: a title, one row per (label, value) whose value
    is not None or "", and a note under it. Every text is escaped."""
    out = ['<table class="scistream">', f'<caption style="text-align:left"><b>{e(title)}</b></caption>']
    for label, value in rows:
        if value is None or value == "":
            continue
        out.append(f'<tr><th style="text-align:left">{e(label)}</th><td style="text-align:left">{e(value)}</td></tr>')
    if note:
        out.append(f'<tr><td colspan="2" style="text-align:left"><small>{e(note)}</small></td></tr>')
    out.append("</table>")
    return "\n".join(out)


def columns(title: str, heads: Sequence[str], rows: Sequence[tuple[str, Sequence[Any]]], note: str = "") -> str:
    """An HTML table of a label column and one column per head; every
    text is escaped."""
    out = ['<table class="scistream">', f'<caption style="text-align:left"><b>{e(title)}</b></caption>',
           "<tr><th></th>" + "".join(f'<th style="text-align:left">{e(h)}</th>' for h in heads) + "</tr>"]
    for label, values in rows:
        if all(v is None or v == "" for v in values):
            continue
        cells = "".join(f'<td style="text-align:left">{e("" if v is None else v)}</td>' for v in values)
        out.append(f'<tr><th style="text-align:left">{e(label)}</th>{cells}</tr>')
    if note:
        out.append(f'<tr><td colspan="{len(heads) + 1}" style="text-align:left"><small>{e(note)}</small></td></tr>')
    out.append("</table>")
    return "\n".join(out)
