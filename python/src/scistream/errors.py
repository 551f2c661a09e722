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
"""

from __future__ import annotations


class SciStreamError(Exception):
    """The base of every error this package raises."""


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
    does not know is raised as APIError itself.
    """

    code: str = ""

    def __init__(self, code: str, message: str, *, status: int = 0, request_id: str = "", gateway: str = "") -> None:
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
