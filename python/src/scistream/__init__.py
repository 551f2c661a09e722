"""scistream: request, watch and release SciStream streams from Python.

    import scistream
    with scistream.stream(inbound="10.0.0.5:5000", outbound="10.1.0.7:5000", target=("10.0.0.20", 8080), num_conn=2, rate="2G") as s:
        print("connect the producer to", s.listeners)

:func:`stream` (and :func:`astream` for asyncio) wires a stream across two
gateways as ``s2uc stream`` does and releases it when the block ends;
:class:`Client` (and :class:`AsyncClient`) calls every route of one gateway's
control API. Credentials and gateways come as s2uc takes them: arguments,
the environment (SCISTREAM_TOKEN, ...), the configuration file and its
profiles, the login of ``s2uc login``. Errors are in :mod:`scistream.errors`.

Every keyword is typed and keyword-only: a type checker refuses one that is
not taken, and at run time it is a TypeError naming the function and the
nearest keyword ("stream() got an unexpected keyword argument 'numconn':
did you mean 'num_conn'?"). Models print on one line and show as a table in
a notebook; reserved rates are bits per second, sampled rates bytes per
second over the gateway's sampling interval.
"""

from .client import ROUTES, UNSET, AsyncClient, Client
from .config import Config
from .errors import (APIError, BadAnswer, CertificateError, Conflict, ConfigError, Internal, InvalidArgument, NoResources,
                     NotFound, NotHTTPS, PermissionDenied, SciStreamError, TransportError, Unauthenticated, Unavailable,
                     Unreachable)
from .models import Info, Stats, Stream
from .rates import format_rate, parse_rate
from .wiring import AsyncWiredStream, RateSample, Released, StreamStatus, WiredStream, astream, stream

__version__ = "0.1.0"

__all__ = [
    "stream", "astream", "WiredStream", "AsyncWiredStream", "RateSample", "StreamStatus", "Released",
    "Client", "AsyncClient", "ROUTES", "UNSET", "Config", "Info", "Stats", "Stream", "parse_rate", "format_rate",
    "SciStreamError", "APIError", "InvalidArgument", "Unauthenticated", "PermissionDenied", "NotFound", "Conflict",
    "NoResources", "Unavailable", "Internal", "TransportError", "Unreachable", "CertificateError", "NotHTTPS",
    "BadAnswer", "ConfigError",
]
