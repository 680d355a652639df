"""JSON encoding rules shared by arguments, results, state and errors.

Arguments are stored as *canonical* JSON (sorted keys, no whitespace, no NaN)
so that an idempotency key compares the meaning of two calls, not the order
their keyword arguments happened to be written in.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .errors import InvalidActorId, InvalidArguments, PayloadTooLarge

#: The widths of the identifier columns in ``store/schema.py`` (checked by a test):
#: actor ids, idempotency keys, reminder keys and effect names...
MAX_ID_LENGTH = 255
#: ... actor type names ...
MAX_TYPE_LENGTH = 128
#: ... and operation names (messages, reminders, effect callbacks). A definition whose
#: names do not fit is refused when the class is defined, not at its first commit.
MAX_OPERATION_LENGTH = 128
#: The longest delay of a message or reminder (100 years): due times are stored as
#: epoch milliseconds in a BIGINT, and a larger value would overflow it mid-enqueue.
MAX_DELAY_SECONDS = 100 * 366 * 86400
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: The one canonical encoder: ``json.dumps`` with these options would build a new
#: encoder for every value (it keeps no state between calls, so threads share it).
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
#: Types that are finite and have no keys or items to look into: the check stops at once.
_LEAVES = frozenset({str, int, bool, type(None)})


def canonical_json(value: Any) -> str:
    """Encode ``value`` deterministically; refuse NaN and infinities."""
    if type(value) is int:  # a common result: what the encoder writes for an int
        return int.__repr__(value)
    return _CANONICAL.encode(value)


def encode_json(value: Any, *, what: str, limit: int) -> str:
    """Encode ``value`` as canonical JSON, refusing non-JSON values and oversize payloads."""
    try:
        text = canonical_json(value)
    except (TypeError, ValueError) as exc:
        raise InvalidArguments(f"{what} is not JSON: {exc}") from None
    if text.isascii():
        size, surrogate = len(text), False
    else:
        try:
            size, surrogate = len(text.encode("utf-8")), False
        except UnicodeEncodeError:
            size, surrogate = len(text.encode("utf-8", "surrogatepass")), True
    if size > limit:
        raise PayloadTooLarge(f"{what} is {size} bytes; the limit is {limit} bytes")
    if surrogate:
        raise InvalidArguments(f"{what} holds a lone surrogate; it cannot be stored")
    return text


def reject_non_finite(value: Any, *, what: str, depth: int = 0) -> None:
    """Refuse NaN and infinities anywhere in ``value``.

    pydantic's JSON mode turns them into ``null`` silently; a stored ``null``
    where the caller passed NaN would be a quiet change of meaning.
    """
    if depth > 200:
        raise InvalidArguments(f"{what} is nested more than 200 levels deep")
    if type(value) in _LEAVES:
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidArguments(f"{what} contains {value!r}, which JSON cannot represent")
    elif isinstance(value, dict):
        _reject_colliding_keys(value, what=what)
        deep = depth >= 200  # then even a leaf one level down is too deep
        for key, item in value.items():
            if deep or type(key) not in _LEAVES:  # {nan: 1} dumps as {"None": 1}
                reject_non_finite(key, what=what, depth=depth + 1)
            if deep or type(item) not in _LEAVES:
                reject_non_finite(item, what=what, depth=depth + 1)
    elif isinstance(value, list | tuple | set | frozenset):
        deep = depth >= 200
        for item in value:
            if deep or type(item) not in _LEAVES:
                reject_non_finite(item, what=what, depth=depth + 1)
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        for item in vars(value).values():
            reject_non_finite(item, what=what, depth=depth + 1)


def _reject_colliding_keys(value: dict[Any, Any], *, what: str) -> None:
    """JSON keys are strings: ``{1: "a", "1": "b"}`` would keep only one of the two."""
    for key in value:
        if not isinstance(key, str):
            break
    else:
        return
    seen: set[str] = set()
    for key in value:
        forms = {key} if isinstance(key, str) else {str(key), json.dumps(key, default=str)}
        if forms & seen:
            raise InvalidArguments(
                f"{what} has keys that are the same in JSON ({key!r} and another): "
                "one value would be lost"
            )
        seen |= forms


def holds_nul(encoded: str) -> bool:
    """Whether canonical JSON ``encoded`` holds U+0000 in a string or a key.

    PostgreSQL's ``jsonb`` cannot store that character. The text test is cheap and
    almost always false; an escaped backslash before ``u0000`` is told apart by
    decoding."""
    if "\\u0000" not in encoded:
        return False
    return _nul_in(json.loads(encoded))


def _nul_in(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any("\x00" in key or _nul_in(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_nul_in(item) for item in value)
    return False


def decode_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


#: Message priorities: 0 (every plain message) to 9 (most urgent); see docs/actors.md.
PRIORITY_RANGE = range(0, 10)


def check_priority(value: object) -> int:
    """Validate a message priority: an int from 0 (plain) to 9 (most urgent)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArguments(f"priority must be an int from 0 to 9, not {value!r}")
    if value not in PRIORITY_RANGE:
        raise InvalidArguments(f"priority must be from 0 (plain) to 9 (most urgent), not {value}")
    return value


def check_identifier(value: object, *, what: str = "actor id") -> str:
    """Validate an actor id or idempotency key: a non-empty, printable string."""
    if not isinstance(value, str):
        raise InvalidActorId(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise InvalidActorId(f"{what} must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidActorId(f"{what} is {len(value)} characters; at most {MAX_ID_LENGTH}")
    if _CONTROL.search(value):
        raise InvalidActorId(f"{what} {value!r} contains control characters")
    if value.endswith(" "):
        # MySQL/MariaDB compare VARCHARs ignoring trailing spaces ("PAD SPACE"), even in
        # a binary collation: 'a ' would address the same row as 'a' there.
        raise InvalidActorId(f"{what} {value!r} ends with a space")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidActorId(f"{what} {value!r} is not valid Unicode text") from None
    return value
