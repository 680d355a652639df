"""The authorization of refs the integrations build from request data.

An actor id taken from a URL is user input: whoever sends the request picks the
actor. The runtime trusts calls with no policy configured only when they come
from the application's own code, so every integration binds the refs it builds
for a request with :class:`~solid_objects.authorization.Untrusted`: a kind of call
with no ``authorize_*`` policy is then denied (``Unauthorized``, 403, nothing
written), as the JavaScript and Ruby Solid Objects deny every call by default.
``allow_all_callers=True`` (``SOLID_OBJECTS["ALLOW_ALL_CALLERS"]`` on Django) is the
explicit opt-in to the in-process default: every caller allowed where no policy
decides.
"""

from __future__ import annotations

from typing import Any, TypeVar

from ..authorization import Untrusted

R = TypeVar("R")


def bind(reference: R, context: Any, *, allow_all_callers: bool) -> R:
    """``reference`` carrying the request's ``context``, untrusted unless opted out."""
    authorization = context if allow_all_callers else Untrusted(context)
    if authorization is None:
        return reference
    bound: R = reference.with_options(authorization=authorization)  # type: ignore[attr-defined]
    return bound
