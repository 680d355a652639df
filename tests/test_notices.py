"""Every wake-up payload kind round-trips; a tampered one is only a hint.

``store/notices.py`` writes and parses every cross-process notice. Each kind here:
encode, parse, get the same values back; change a byte of a signed one (or sign it
with another key) and it parses as the plain hint (``(pk, None)`` for ``m:``, no
outcome for ``o:``). Every parse is total: Unicode digits, truncated JSON and deep
nesting parse as "read the database", never raise. PostgreSQL's SQL HMAC (the
one-statement enqueue signs ``m:`` in SQL) equals Python's ``hmac``.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable

import pytest

from solid_objects import Runtime
from solid_objects.store.notices import (
    MAX_NOTIFY_PAYLOAD,
    WAKE,
    NoticeKey,
    broadcast_hint,
    done_hint,
    held_hint,
    message_fields,
    message_hint,
    outcome_id,
    outcome_notice,
    parse_broadcast_hint,
    parse_done_hint,
    parse_held_hint,
    parse_message_hint,
    read_outcome,
)
from tests.conftest import BACKENDS

SECRET = "ab" * 32
KEY = NoticeKey(lambda: SECRET)
OTHER = NoticeKey(lambda: "cd" * 32)


def tampered(payload: str) -> list[str]:
    """The payload with one character of its text, or of its MAC, changed, or unsigned."""
    text, _, mac = payload.rpartition("#")
    flip = "0" if mac[0] != "0" else "1"
    return [
        f"{text[:-1]}{'x' if text[-1] != 'x' else 'y'}#{mac}",
        f"{text}#{flip}{mac[1:]}",
        text,
        f"{text}#{mac.upper()}",
        f"{text}#{mac[:-1]}",
    ]


def test_the_wake_payload_is_one_letter() -> None:
    assert WAKE == "w"


def test_done_hint_round_trips() -> None:
    assert parse_done_hint(done_hint("m-1")) == "m-1"
    assert parse_done_hint("w") is None


def test_held_hint_round_trips_and_refuses_other_payloads() -> None:
    assert parse_held_hint(held_hint(42, "123-ab:cd")) == (42, "123-ab:cd")
    for other in ("w", "d:abc", "b:[]", "h:", "h:x:owner", "h:12", "h:\u00b2:o", "h:-1:o"):
        assert parse_held_hint(other) is None


def test_broadcast_hint_round_trips_and_refuses_other_payloads() -> None:
    assert parse_broadcast_hint(broadcast_hint("Room", "a:b/\u00e9")) == ("Room", "a:b/\u00e9")
    for other in ("w", "b:", "b:[", "b:[1,2]", 'b:["a"]', 'b:["a","b","c"]', "b:" + "[" * 5000):
        assert parse_broadcast_hint(other) is None


def test_outcome_round_trips_signed_and_a_tampered_one_is_no_outcome() -> None:
    payload = outcome_notice(KEY, "m1", "completed", '{"n":1}', None)
    assert read_outcome(payload, KEY) == ("m1", "completed", '{"n":1}', None)
    assert read_outcome(payload, OTHER) is None  # another key: another set of tables
    for bad in tampered(payload):
        assert read_outcome(bad, KEY) is None
        assert outcome_id(bad) in ("m1", None)  # its waiter, if any, reads the row
    forged = 'o:["m1","completed","1000000",null]'
    assert read_outcome(forged, KEY) is None and outcome_id(forged) == "m1"
    for other in ("w", "d:m1", "o:", "o:[1,2]", 'o:["a","b",3,null]', "o:{", "o:" + "[" * 5000):
        assert read_outcome(other, KEY) is None
        assert outcome_id(other) in (None, "a")  # a named message: its waiter reads the row
    large = outcome_notice(KEY, "m2", "completed", '"' + "x" * 8000 + '"', None)
    assert large == "d:m2"
    edge = outcome_notice(KEY, "m3", "completed", '"' + "x" * 7800 + '"', None)
    assert len(edge) <= MAX_NOTIFY_PAYLOAD


def test_message_hint_round_trips_signed_and_a_tampered_one_reads_the_mailbox() -> None:
    fields = message_fields("id1", "T", "a:b", "op", '{"x":"\u00e9"}', None, "tp", None)
    assert fields is not None and fields.isascii()
    payload = message_hint(KEY, 7, "123-ab:cd", 3, 1000, fields)
    assert len(payload) <= MAX_NOTIFY_PAYLOAD
    assert parse_message_hint(payload, "123-xy", KEY) is None  # another owner's: ignored
    assert parse_message_hint(payload, "9-ab:cd", KEY) is None
    pk, message = parse_message_hint(payload, "123-ab:cd", KEY) or (None, None)
    assert pk == 7 and message is not None
    assert (message.id, message.actor_id, message.seq, message.arguments) == (
        "id1",
        "a:b",
        3,
        '{"x":"\u00e9"}',
    )
    assert (message.status, message.available_at, message.created_at) == ("queued", 1000, 1000)
    assert parse_message_hint(payload, "123-ab:cd", OTHER) == (7, None)
    for bad in tampered(payload):
        assert parse_message_hint(bad, "123-ab:cd", KEY) == (7, None)
    # Signed but malformed: read the mailbox; no pk: wake the poller.
    for bad in ("[1]", "{", '["a","b","c","d",5,null,null,null]', "", "[" * 5000):
        assert parse_message_hint(KEY.sign(f"m:7:o:3:1000:{bad}"), "o", KEY) == (7, None)
    assert parse_message_hint(KEY.sign("m:7:o:x:1000:" + fields), "o", KEY) == (7, None)
    assert parse_message_hint(KEY.sign("m:7:o:\u00b2:1000:" + fields), "o", KEY) == (7, None)
    assert parse_message_hint(KEY.sign("m:7:o:3:\u00b9:" + fields), "o", KEY) == (7, None)
    assert parse_message_hint(KEY.sign("m:x:o:3:1000:" + fields), "o", KEY) == (None, None)
    assert parse_message_hint("m:\u00b2:o:3:1000:" + fields, "o", KEY) == (None, None)
    assert message_fields("id", "T", "a", "op", '"' + "x" * 8000 + '"', None, None, None) is None
    largest = message_fields(
        "i" * 36, "T" * 128, "a" * 255, "op", '"' + "x" * 7000 + '"', *[None] * 3
    )
    if largest is not None:
        signed = message_hint(KEY, 2**63 - 1, "o" * 64, 2**63 - 1, 2**63 - 1, largest)
        assert len(signed) <= MAX_NOTIFY_PAYLOAD


def test_the_key_is_hmac_sha256_of_the_stored_secret() -> None:
    text = 'o:["m","completed",null,null]'
    expected = hmac.new(bytes.fromhex(SECRET), text.encode(), hashlib.sha256).hexdigest()
    assert KEY.sign(text) == f"{text}#{expected}"
    assert KEY.verify(f"{text}#{expected}") == text


def test_without_a_stored_secret_a_process_signs_with_its_own_key() -> None:
    lone, other = NoticeKey(lambda: None), NoticeKey(lambda: None)
    signed = lone.sign("o:[]")
    assert lone.verify(signed) == "o:[]" and other.verify(signed) is None


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b == "postgresql"], indirect=True)
def test_the_sql_hmac_equals_pythons(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(workers=0)
    key = rt.store.notice_key
    for text in ("m:1:o:2:3:[]", "m:" + "\u00e9\u4e2d" * 300, ""):
        with rt.store.read() as tx:
            mac = tx.scalar(
                "SELECT " + NoticeKey.sql_mac("CAST(:text AS TEXT)"),
                {"text": text, **key.sql_params()},
            )
        assert mac == key.mac(text)
        assert key.verify(f"{text}#{mac}") == text


def test_every_installed_database_has_its_own_secret(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(workers=0)
    with rt.store.read() as tx:
        value = tx.scalar(f"SELECT value FROM {rt.store.prefix}secrets WHERE name = 'notice_key'")
    assert isinstance(value, str) and len(bytes.fromhex(value)) == 32
    expected = hmac.new(bytes.fromhex(value), b"w", hashlib.sha256).hexdigest()
    assert rt.store.notice_key.mac("w") == expected
