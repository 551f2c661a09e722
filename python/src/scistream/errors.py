"""The errors of the scistream package.

A gateway's refusal is an :class:`APIError`, one subclass per stable code of
the control API (``NotFound`` for ``not_found`` ...), carrying the code, the
gateway's public message, the HTTP status and the request id under which the
gateway logged the request (quote it to the gateway's operator).

A request that got no answer from a gateway's API is a :class:`TransportError`
(:class:`Unreachable`, :class:`CertificateError`, :class:`NotHTTPS`); an
answer the client will not act on (a listener that is not host:port, a UID
that is not one...) is :class:`BadAnswer`; a configuration the client cannot
use is :class:`ConfigError`. Every one is a :class:`SciStreamError`.

An error's text is printable (:func:`printable`, line by line), as s2uc
prints its errors (cmd/s2uc/printable.go): a gateway's or an identity
provider's text in it cannot drive the terminal or the notebook it is
printed on (an OSC sequence retitles the window or hides a link, SGR
recolours, U+202E reorders the line); each such character is written as its
escape, ``\\x1b`` or ``\\u202e``.
"""

from __future__ import annotations

from typing import Any

_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def _escape(c: str) -> str:
    """Go's strconv.QuoteRune of a rune that is not printable, without its
    quotes."""
    r = ord(c)
    if c in _GO_ESCAPES:
        return _GO_ESCAPES[c]
    if r < 0x20 or r == 0x7F:
        return f"\\x{r:02x}"
    if r < 0x10000:
        return f"\\u{r:04x}"
    return f"\\U{r:08x}"


def printable(s: str) -> str:
    """s, text from a gateway, fit to print, as s2uc's printable: every
    character that is not printable (str.isprintable, as Go's
    unicode.IsPrint: the C0 and C1 controls with tab and newline, DEL, the
    format characters such as U+202E, the separators but the space,
    unassigned code points) is written as its Go escape (``\\x1b``,
    ``\\u202e``, ``\\n``); a lone surrogate (which Go's JSON decoder makes
    U+FFFD) becomes U+FFFD."""
    if s.isprintable():
        return s
    out = []
    for c in s:
        if c.isprintable():
            out.append(c)
        elif 0xD800 <= ord(c) < 0xE000:
            out.append("\ufffd")
        else:
            out.append(_escape(c))
    return "".join(out)


def printable_lines(s: str) -> str:
    """s printable line by line: its newlines stay, as s2uc's
    printableError keeps the lines of an error."""
    return "\n".join(printable(line) for line in s.split("\n"))


class SciStreamError(Exception):
    """The base of every error this package raises. Its message is
    printable_lines (whatever text from a gateway it carries)."""

    def __init__(self, *args: Any) -> None:
        if args and isinstance(args[0], str):
            args = (printable_lines(args[0]),) + args[1:]
        super().__init__(*args)


class ConfigError(SciStreamError, ValueError):
    """A setting (argument, environment variable or configuration file key)
    the client cannot use. The message names the setting and the fix."""


class TransportError(SciStreamError):
    """A request that got no answer from the gateway's control API."""

    def __init__(self, gateway: str, message: str) -> None:
        super().__init__(f"s2cs {gateway}: {message}")
        self.gateway = gateway


class Unreachable(TransportError):
    """No connection to the gateway's address could be opened (refused, no
    route, unknown name, timeout)."""


class CertificateError(TransportError):
    """The gateway's TLS certificate is not the one pinned (server_cert, by
    PEM file or sha256 fingerprint), nor issued by it for the gateway's
    address, or, without a pin, the system's roots do not vouch for it."""


class NotHTTPS(TransportError):
    """Something answered in plain HTTP; the control API is HTTPS only."""


class BadAnswer(SciStreamError):
    """A gateway answered what no SciStream gateway would (a stream UID that
    is not one, a listener that is not host:port...). The client acted on
    none of it (a stream the answer named was released again)."""

    def __init__(self, gateway: str, message: str) -> None:
        super().__init__(f"s2cs {gateway}: answer refused: {message}")
        self.gateway = gateway


class APIError(SciStreamError):
    """A gateway's refusal: ``code`` (stable), ``message`` (for humans),
    ``status`` (HTTP), ``request_id`` (the id of the gateway's log lines
    about the request) and ``gateway`` (its control address).

    Subclasses stand for the codes of the control API; a code this package
    does not know is raised as APIError itself (a code that is not
    lower-case letters and ``_`` is no code: the client refuses the answer,
    :class:`BadAnswer`). message and request_id are printable_lines, as the
    error's text.
    """

    code: str = ""

    def __init__(self, code: str, message: str, *, status: int = 0, request_id: str = "", gateway: str = "") -> None:
        message, request_id = printable_lines(message), printable(request_id)
        self.code = code
        self.message = message
        self.status = status
        self.request_id = request_id
        self.gateway = gateway
        text = f"{code}: {message}"
        if request_id:
            text += f" (request {request_id} in the log of gateway {gateway})" if gateway else f" (request {request_id})"
        super().__init__(text)


class InvalidArgument(APIError):
    """invalid_argument (400): the request is malformed or a field is out of range."""

    code = "invalid_argument"


class Unauthenticated(APIError):
    """unauthenticated (401): no token, or one the gateway does not accept."""

    code = "unauthenticated"


class PermissionDenied(APIError):
    """permission_denied (403): the caller lacks the role the route needs,
    names another owner without being an operator, or the gateway refuses wan
    tcp."""

    code = "permission_denied"


class NotFound(APIError):
    """not_found (404): no such stream of the caller's, or no such endpoint."""

    code = "not_found"


class Conflict(APIError):
    """conflict (409): the uid is in use, the stream has ended, or it is
    attached to another certificate."""

    code = "conflict"


class NoResources(APIError):
    """no_resources (507): not enough free ports, capacity or quota (the
    message names the limit)."""

    code = "no_resources"


class Unavailable(APIError):
    """unavailable (503): the gateway is not ready, cannot reach its state or
    the identity provider; retry."""

    code = "unavailable"


class Internal(APIError):
    """internal (500): a server fault; quote request_id to the operator."""

    code = "internal"


#: The exception class of each error code of the control API (the Code
#: enum of openapi.yaml; a test checks they are the same set).
CODES: dict[str, type[APIError]] = {
    cls.code: cls
    for cls in (InvalidArgument, Unauthenticated, PermissionDenied, NotFound, Conflict, NoResources, Unavailable, Internal)
}


def api_error(code: str, message: str, *, status: int = 0, request_id: str = "", gateway: str = "") -> APIError:
    """The exception of a gateway's error answer: the class of its code, or
    APIError for a code this package does not know."""
    cls = CODES.get(code, APIError)
    return cls(code, message, status=status, request_id=request_id, gateway=gateway)
