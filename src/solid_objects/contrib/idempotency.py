"""A request's ``Idempotency-Key`` header, carried to the calls and sends it makes.

The IETF httpapi draft "The Idempotency-Key HTTP Header Field" lets a client send
``Idempotency-Key: "<key>"`` with a POST, so that retrying it (after a timeout, a
504, a dropped connection) does not do the work twice. Each integration reads the
header into a :class:`RequestKeys`; the handler passes each call or send through
:meth:`RequestKeys.keyed`, which gives it the idempotency key
``http:<key>:<n>``, ``n`` counting the keyed calls of the request from 1::

    keys = idempotency_keys(request)                  # the framework's helper
    count = keys.keyed(cart.add)(sku="tea")           # key http:<key>:1
    keys.keyed(cart.checkout).send()                  # key http:<key>:2

A retry of the request makes the same calls in the same order, so each gets the
key it had the first time and the library returns that call's first outcome
(its result, or its ``Rejected``), running nothing again; a retry that arrives
while the first attempt is still running waits for the same outcome. The same key
reused with different arguments or another operation for the same actor is
refused with ``IdempotencyConflict`` (422, as the draft says for a key reused with
another payload). A malformed header is refused with :class:`InvalidIdempotencyKey`
(400) before any call; with ``required=True`` so is a missing one.

Keys are scoped per actor (the library keeps them with the actor's messages): the
same header sent to another actor is another request. A handler whose calls depend
on state it read first should key by operation instead of by position:
``handle.with_options(idempotency_key=keys.key_for("checkout"))``.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from ..errors import InvalidArguments
from . import problems

__all__ = ["HEADER", "InvalidIdempotencyKey", "RequestKeys", "from_headers", "parse"]

#: The header's name (HTTP header names are case-insensitive).
HEADER = "Idempotency-Key"
#: The longest key accepted (a UUID is 36 characters; the derived keys must fit in 255).
MAX_LENGTH = 200
#: sf-string (RFC 8941): printable ASCII in quotes, ``\\"`` and ``\\\\`` escaped.
_SF_STRING = re.compile(r'"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"')
#: The bare form many clients send (Stripe's, for one): visible ASCII, no quotes.
_BARE = re.compile(r"[\x21\x23-\x2b\x2d-\x7e]+")

H = TypeVar("H")


class InvalidIdempotencyKey(InvalidArguments):
    """The ``Idempotency-Key`` header is malformed (or missing where it is required): 400."""


problems.register(InvalidIdempotencyKey, 400, "Invalid Idempotency-Key header")


def parse(value: str | None) -> str | None:
    """The key in a header value: ``"abc"`` (the draft's sf-string) or bare ``abc``."""
    if value is None:
        return None
    text = value.strip(" \t")
    quoted = _SF_STRING.fullmatch(text)
    if quoted:
        key = re.sub(r"\\(.)", r"\1", quoted.group(1))
    elif _BARE.fullmatch(text):
        key = text
    else:
        raise InvalidIdempotencyKey(
            f"the {HEADER} header must be a quoted string of printable ASCII, "
            f'e.g. {HEADER}: "8e03978e-40d5-43e8-bc93-6894a57f9324"'
        )
    if not key.strip() or len(key) > MAX_LENGTH:
        raise InvalidIdempotencyKey(
            f"the {HEADER} header must hold 1 to {MAX_LENGTH} characters, not {len(key)}"
        )
    return key


class RequestKeys:
    """The idempotency keys of one request's calls, derived from its header."""

    def __init__(self, key: str | None) -> None:
        #: The client's key, None when the request carried none.
        self.key = key
        self._count = 0

    def __bool__(self) -> bool:
        return self.key is not None

    def next_key(self) -> str | None:
        """The key of the request's next keyed call: ``http:<key>:<n>``; None without a header."""
        if self.key is None:
            return None
        self._count += 1
        return f"http:{self.key}:{self._count}"

    def key_for(self, name: str) -> str | None:
        """A key by name instead of position: ``http:<key>:<name>`` (None without a header)."""
        return None if self.key is None else f"http:{self.key}:{name}"

    def keyed(self, handle: H) -> H:
        """``handle.with_options(idempotency_key=<next key>)``; ``handle`` itself without one.

        ``handle`` is an operation of a ref (``cart.add``), sync or async.
        """
        key = self.next_key()
        if key is None:
            return handle
        keyed: H = handle.with_options(idempotency_key=key)  # type: ignore[attr-defined]
        return keyed


def from_headers(headers: Any, *, required: bool = False) -> RequestKeys:
    """The request's keys from its headers (the framework's case-insensitive mapping)."""
    value = headers.get(HEADER)
    if value is None and required:
        raise InvalidIdempotencyKey(f"this request needs an {HEADER} header")
    return RequestKeys(parse(value))
