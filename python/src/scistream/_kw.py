"""Wrong keyword arguments said as s2uc says a wrong flag: the public name of
what was called and the nearest keyword it takes.

``stream(numconn=2)`` raises ``TypeError: stream() got an unexpected
keyword argument 'numconn': did you mean 'num_conn'?`` (s2uc: "unknown flag
--numconn: did you mean --num_conn?"), where Python alone would name no
keyword it takes (before 3.13), or name a private class
(``_Spec.__init__()``). The signature stays the function's own
(functools.wraps for inspect and help(); the decorator keeps f's type for
type checkers), so IDEs complete the keywords and mypy refuses a wrong one
before anything runs.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from typing import Any, Callable, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _public_name(f: Callable[..., Any], args: tuple[Any, ...]) -> str:
    """What the caller called: "stream()", "Client()" (for __init__, the
    class of the object made), "Client.get()"."""
    parts = f.__qualname__.split(".")
    if parts[-1] == "__init__" and args:
        return f"{type(args[0]).__name__}()"
    if len(parts) > 1 and args and not isinstance(args[0], type):
        # A method: the class of the object it was called on (a subclass's
        # name, never a private base's).
        return f"{type(args[0]).__name__}.{parts[-1]}()"
    return f"{f.__qualname__}()"


def keywords(f: F) -> F:
    """Wraps f so that a keyword it does not take is a TypeError naming the
    public function and the nearest keyword (difflib), and any other
    mismatch of the arguments (too many, one missing) names the public
    function too; the call itself is f's, unchanged."""
    sig = inspect.signature(f)
    params = list(sig.parameters.values())
    names = [p.name for p in params if p.kind in _NAMED and p.name not in ("self", "cls")]
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    allowed = frozenset(names)

    def check(args: tuple[Any, ...], kw: dict[str, Any]) -> None:
        if not takes_any:
            for k in kw:
                if k not in allowed:
                    near = difflib.get_close_matches(k, names, n=1, cutoff=0.6)
                    hint = f": did you mean {near[0]!r}?" if near else (
                        f"; it takes {', '.join(names)}" if names else "; it takes no keyword arguments")
                    raise TypeError(f"{_public_name(f, args)} got an unexpected keyword argument {k!r}{hint}")
        try:
            sig.bind(*args, **kw)
        except TypeError as e:
            raise TypeError(f"{_public_name(f, args)}: {e}") from None

    if inspect.iscoroutinefunction(f):
        @functools.wraps(f)
        async def acall(*args: Any, **kw: Any) -> Any:
            check(args, kw)
            return await f(*args, **kw)
        return cast(F, acall)

    @functools.wraps(f)
    def call(*args: Any, **kw: Any) -> Any:
        check(args, kw)
        return f(*args, **kw)
    return cast(F, call)
