"""solid_objects.contrib.problems: the one table every framework answers errors from."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from solid_objects.contrib import problems
from solid_objects.errors import (
    CallTimeout,
    ConfigurationError,
    InvalidActorId,
    InvalidArguments,
    MailboxFull,
    MessageCancelled,
    MessageFailed,
    PayloadTooLarge,
    Rejected,
    RuntimeClosed,
    SolidObjectsError,
)


class Teapot(SolidObjectsError):
    """An application's own error, mapped with register()."""


@pytest.fixture
def teapot() -> Iterator[None]:
    problems.register(Teapot, 418, "I am a teapot")
    yield
    problems.unregister(Teapot)


def test_the_nearest_class_in_the_mro_wins() -> None:
    assert problems.document(PayloadTooLarge("too big"))["status"] == 413
    assert problems.document(InvalidActorId("bad id"))["status"] == 422  # via InvalidArguments
    assert problems.document(InvalidArguments("x"))["status"] == 422
    assert problems.document(RuntimeClosed("closed"))["status"] == 503  # via RuntimeNotStarted
    assert problems.headers(RuntimeClosed("closed")) == {"Retry-After": "1"}
    assert problems.lookup(ValueError("not ours")) is None


def test_rejected_carries_its_code_details_and_message_id() -> None:
    exc = Rejected("empty", "an empty cart cannot check out", {"n": 0})
    exc.message_id = "m1"
    body = problems.document(exc)
    assert body == {
        "type": "urn:solid-objects:problem:rejected",
        "title": "Rejected by the actor",
        "status": 409,
        "detail": "an empty cart cannot check out",
        "code": "empty",
        "details": {"n": 0},
        "message_id": "m1",
    }


def test_a_timeout_before_the_enqueue_has_no_message_id() -> None:
    body = problems.document(CallTimeout("the enqueue"))
    assert (body["status"], body["message_id"], body["waiting_on"]) == (504, None, "the enqueue")


def test_a_dead_letter_keeps_the_worker_error_text_from_the_client() -> None:
    body = problems.document(MessageFailed("m9", {"type": "KeyError", "message": "secret"}))
    assert body["status"] == 500 and body["message_id"] == "m9"
    assert "secret" not in str(body) and "KeyError" not in str(body)


def test_register_adds_an_entry_and_refuses_a_status_that_is_not_an_error(teapot: None) -> None:
    assert problems.document(Teapot("short and stout"))["status"] == 418
    assert Teapot in problems.handled()
    with pytest.raises(ConfigurationError, match="4xx or 5xx"):
        problems.register(Teapot, 200, "fine")


def test_backpressure_is_429_with_retry_after_and_a_cancelled_message_is_409() -> None:
    full = problems.document(MailboxFull("the mailbox of Cart 'c' is full"))
    assert full["status"] == 429
    assert problems.headers(MailboxFull("full")) == {"Retry-After": "1"}
    assert problems.document(MessageCancelled("cancelled"))["status"] == 409
