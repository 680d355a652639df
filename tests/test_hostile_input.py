"""Hostile input, fuzzed (contract 2.8): a typed error and nothing written, or an exact round trip.

``test_input.py`` checks chosen bad inputs; here hypothesis generates them for the
public API on every database: argument payloads (deep, huge, NaN and infinities,
non-JSON types, lone surrogates and other Unicode edge cases, NUL bytes, SQL
metacharacters), actor ids, operation names, idempotency keys and per-call
options. A model decides what each input must do: refused with its type from
``solid_objects.errors`` (the row counts of every table stay the same), or accepted
and run by a worker, whose result and the stored row must equal the input. After
the fuzzing the same runtime must still serve a call. The command line gets the
same treatment through real ``python -m solid_objects`` processes.

Each fuzz test runs 100 examples per database (about a second each, on SQLite
and on the servers; the command-line test starts a process per case and takes
longer); ``SOLID_FUZZ_EXAMPLES=5000`` runs a longer fuzz.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import subprocess
import sys
import unicodedata
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from solid_objects import Actor, AsyncRuntime, Runtime, query
from solid_objects.codec import MAX_DELAY_SECONDS, MAX_ID_LENGTH
from solid_objects.errors import (
    ConfigurationError,
    IdempotencyConflict,
    InvalidActorId,
    InvalidArguments,
    PayloadTooLarge,
    UnknownOperation,
)
from solid_objects.options import Options

from .conftest import FAST

LIMIT = 4096  # max_payload_bytes of the fuzzed runtime: "huge" stays cheap to generate
DEPTH = 200  # deepest nesting codec.reject_non_finite accepts
TABLES = ("actors", "messages", "effects", "reminders")
SERIAL = itertools.count()  # fresh actor ids across hypothesis examples


def _examples(default: int) -> int:
    return int(os.environ.get("SOLID_FUZZ_EXAMPLES") or default)


FUZZ = settings(
    max_examples=_examples(100),
    deadline=None,
    derandomize=True,  # the same examples on every run: CI stays repeatable
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class Echo(Actor):
    """Returns what it was given; ``calls`` shows how many turns really ran."""

    calls: int = 0

    def echo(self, data: Any = None) -> Any:
        self.calls += 1
        return data

    def put(self, key: str, value: int = 0) -> dict[str, int]:
        self.calls += 1
        return {key: value}

    @query
    def peek(self, data: Any = None) -> Any:
        return data


class Refused(Exception):
    """The model's verdict: this input must be refused with ``error``."""

    def __init__(self, error: type[Exception]) -> None:
        super().__init__(error.__name__)
        self.error = error


# --- the model ------------------------------------------------------------------------


def _has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def too_long(value: int) -> bool:
    """Python refuses to print an int of more than 4300 digits (so JSON cannot hold it)."""
    try:
        str(value)
    except ValueError:
        return True
    return False


def expected_json(value: Any, depth: int = 0) -> Any:
    """The JSON value a valid JSON-native payload is stored as; Refused otherwise."""
    if depth > DEPTH:
        raise Refused(InvalidArguments)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if too_long(value):
            raise Refused(InvalidArguments)
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Refused(InvalidArguments)
        return value
    if isinstance(value, str):
        if _has_surrogate(value):
            raise Refused(InvalidArguments)
        return value
    if isinstance(value, list | tuple):
        return [expected_json(v, depth + 1) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            assert isinstance(k, str)
            out[expected_json(k, depth + 1)] = expected_json(v, depth + 1)
        return out
    raise TypeError(f"not JSON-native: {type(value).__name__}")


def expected_payload(value: Any) -> Any:
    """What ``echo(data=value)`` must store and return, or Refused."""
    stored = expected_json(value, depth=1)  # the arguments object is level 0
    text = json.dumps({"data": stored}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode("utf-8")) > LIMIT:
        raise Refused(PayloadTooLarge)
    return stored


def valid_identifier(value: object) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_ID_LENGTH
        and not any(ord(c) < 0x20 or ord(c) == 0x7F for c in value)
        and not _has_surrogate(value)
        and not value.endswith(" ")
    )


# --- strategies ------------------------------------------------------------------------

#: Every code point, lone surrogates included (hypothesis leaves them out by default).
ANY_CHAR = st.characters(codec=None, categories=None)
NASTY_STRINGS = st.sampled_from(
    [
        "",
        "'",
        '"; DROP TABLE solid_messages; --',
        "' OR '1'='1",
        "%s %(x)s :x ? $1 {now} {messages}",
        "\\",
        "\x00",
        "a\x00b",
        "\ud800",
        "\udfff",
        "\ufeff",
        "\ufffe\uffff",
        "e\u0301",
        "\u00e9",
        "\U0010ffff",
        "🎉" * 50,
        "\u202e\u200b\u2028\u2029",
        "null",
        "NaN",
        "Infinity",
        "${jndi:ldap://x}",
        "<script>alert(1)</script>",
    ]
)
TEXT = st.one_of(NASTY_STRINGS, st.text(ANY_CHAR, max_size=40))
HUGE_TEXT = st.integers(LIMIT - 64, LIMIT + 64).map(lambda n: "x" * n)
FLOATS = st.floats(allow_nan=True, allow_infinity=True)
INTS = st.one_of(
    st.integers(),
    st.sampled_from([2**63, -(2**63) - 1]),
    st.integers(4298, 4301).map(lambda digits: 10**digits),
)
JSON_LEAVES = st.one_of(st.none(), st.booleans(), INTS, FLOATS, TEXT, HUGE_TEXT)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(TEXT, inner, max_size=4),
    ),
    max_leaves=12,
)


def nested(depth: int, leaf: Any = 0) -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


DEEP = st.sampled_from([DEPTH - 1, DEPTH, DEPTH + 1, 1000, 100_000]).map(nested)


class Opaque:
    def __init__(self) -> None:
        self.x = math.nan


#: Python values that are not JSON: pydantic's JSON mode converts some (its result
#: is what is stored, and what the operation receives); the rest must be refused.
NON_JSON = st.one_of(
    st.binary(max_size=8),
    st.sets(st.integers(), max_size=3),
    st.frozensets(st.text(max_size=3), max_size=3),
    st.complex_numbers(allow_nan=True, allow_infinity=True),
    st.sampled_from([Decimal("NaN"), Decimal("1.5"), Decimal("-Infinity")]),
    st.dictionaries(st.integers(), st.integers(), max_size=3),
    st.dictionaries(st.text(ANY_CHAR, max_size=3), st.integers(), max_size=3),
    st.builds(object),
    st.builds(Opaque),
    st.just(print),
    st.just(Echo),
    st.just(iter([1])),
)


# --- helpers ---------------------------------------------------------------------------


def counts(rt: Runtime) -> dict[str, int]:
    with rt.store.read() as tx:
        return {t: int(tx.scalar(f"SELECT COUNT(*) FROM solid_{t}")) for t in TABLES}


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Iterator[Runtime]:
    """A caller runtime that runs turns with ``testing.drain()``, and a last sanity call."""
    runtime = make_runtime(workers=0, max_payload_bytes=LIMIT)
    yield runtime
    control = runtime.ref(Echo, "control").echo.send(data={"still": "working"})
    runtime.testing.drain()
    assert control.result() == {"still": "working"}


def refused(rt: Runtime, error: type[Exception], action: Callable[[], Any]) -> None:
    """``action`` raises ``error`` (the exact family, not just any exception) and writes nothing."""
    before = counts(rt)
    with pytest.raises(error):
        action()
    assert counts(rt) == before, "a refused input wrote rows"


def stored_arguments(rt: Runtime, message_id: str) -> Any:
    with rt.store.read() as tx:
        text = tx.scalar("SELECT arguments FROM solid_messages WHERE id = :id", {"id": message_id})
    return json.loads(text)


def round_trip(rt: Runtime, actor_id: str, value: Any) -> Any:
    """Send ``echo(data=value)``, run it, return its result (checked against the row)."""
    before = counts(rt)["messages"]
    message = rt.ref(Echo, actor_id).echo.send(data=value)
    rt.testing.drain()
    assert counts(rt)["messages"] == before + 1
    result = message.result()
    assert stored_arguments(rt, message.id) == {"data": result}
    return result


# --- argument payloads -------------------------------------------------------------------


@FUZZ
@given(value=st.one_of(JSON_VALUES, DEEP))
def test_fuzzed_json_payloads_are_refused_typed_or_round_trip_exactly(
    rt: Runtime, value: Any
) -> None:
    try:
        expected = expected_payload(value)
    except Refused as verdict:
        refused(rt, verdict.error, lambda: rt.ref(Echo, "fuzz").echo.send(data=value))
        if verdict.error is not PayloadTooLarge:  # a query's arguments are never stored
            refused(rt, verdict.error, lambda: rt.ref(Echo, "fuzz").peek(data=value))
        return
    assert round_trip(rt, "fuzz", value) == expected
    assert rt.ref(Echo, "fuzz").peek(data=value) == expected  # a query: nothing stored


@FUZZ
@given(value=NON_JSON)
def test_non_json_python_values_are_refused_typed_or_stored_as_what_the_operation_gets(
    rt: Runtime, value: Any
) -> None:
    """pydantic's JSON mode turns ``bytes`` into text, a set into a list, and so on; the
    operation must then receive exactly what was stored. Anything else is refused."""
    before = counts(rt)
    try:
        result = round_trip(rt, "other", value)
    except InvalidArguments:
        assert counts(rt) == before
        return
    assert json.loads(json.dumps(result)) == result  # plain JSON, nothing Python-only


@pytest.mark.parametrize(
    "value",
    [
        {math.nan: 1},  # pydantic would store the key as "None"
        {"k": {(1.0, math.inf): 1}},
        {"\ud800": 1},  # a lone surrogate as a key
        b"\xff\xfe",  # bytes that are not UTF-8
        {"k": b"\x80"},
        [Opaque()],
    ],
    ids=[
        "nan-key",
        "inf-in-tuple-key",
        "surrogate-key",
        "non-utf8-bytes",
        "nested-bytes",
        "object",
    ],
)
def test_values_that_cannot_be_stored_faithfully_are_refused(rt: Runtime, value: Any) -> None:
    refused(rt, InvalidArguments, lambda: rt.ref(Echo, "x").echo.send(data=value))


@FUZZ
@given(key=st.one_of(TEXT, st.integers()), value=st.one_of(INTS, TEXT, FLOATS, st.none()))
def test_typed_arguments_are_validated_before_anything_is_written(
    rt: Runtime, key: Any, value: Any
) -> None:
    """``put(key: str, value: int)``: arguments are strict, so only a str key
    and an int value pass; nothing converts ("12", 3.0)."""
    ref = rt.ref(Echo, "typed")
    ok_key = isinstance(key, str) and not _has_surrogate(key)
    ok_value = isinstance(value, int) and not isinstance(value, bool) and not too_long(value)
    if not (ok_key and ok_value):
        refused(rt, InvalidArguments, lambda: ref.put.send(key=key, value=value))
        return
    size = len(json.dumps({"key": key, "value": int(value)}, ensure_ascii=False).encode())
    if size > LIMIT:
        refused(rt, PayloadTooLarge, lambda: ref.put.send(key=key, value=value))
        return
    message = ref.put.send(key=key, value=value)
    rt.testing.drain()
    assert message.result() == {key: int(value)}


# --- actor ids ----------------------------------------------------------------------------


def id_variants(actor_id: str) -> list[str]:
    """Ids a database could wrongly treat as ``actor_id``: case, normalization, padding."""
    variants = [
        actor_id.upper(),
        actor_id.lower(),
        actor_id.swapcase(),
        unicodedata.normalize("NFD", actor_id),
        unicodedata.normalize("NFC", actor_id),
        actor_id + "\u00a0",
        " " + actor_id,
        actor_id + " ",
    ]
    return [v for v in variants if v != actor_id]


ACTOR_IDS = st.one_of(
    TEXT,
    st.text(ANY_CHAR, min_size=MAX_ID_LENGTH - 2, max_size=MAX_ID_LENGTH + 2),
    st.sampled_from(
        ["Cart-1", "Cart-1 ", "ß", "ǅ", "İ", " ", "a" * MAX_ID_LENGTH, "🎉" * MAX_ID_LENGTH]
    ),
    st.integers(),
    st.none(),
    st.binary(max_size=4),
    st.floats(),
)


@FUZZ
@given(actor_id=ACTOR_IDS)
def test_fuzzed_actor_ids_are_refused_typed_or_stay_distinct_and_exact(
    rt: Runtime, actor_id: Any
) -> None:
    """A valid id addresses exactly one row, stored as given; ids that differ only in
    case, Unicode normalization or padding are different actors on every database."""
    if not valid_identifier(actor_id):
        refused(rt, InvalidActorId, lambda: rt.ref(Echo, actor_id).echo.send(data=1))
        return
    ids = [actor_id, *(v for v in id_variants(actor_id) if valid_identifier(v))]
    ids = list(dict.fromkeys(ids))
    before = {i: rt.ref(Echo, i).snapshot()["calls"] for i in ids}
    messages = [rt.ref(Echo, i).echo.send(data=i) for i in ids]
    rt.testing.drain()
    assert [m.result() for m in messages] == ids
    for i in ids:
        assert rt.ref(Echo, i).snapshot()["calls"] == before[i] + 1, f"{i!r} shares a row"
    with rt.store.read() as tx:
        for i in ids:
            stored = tx.rows(
                "SELECT actor_id FROM solid_actors WHERE actor_type = 'Echo' AND actor_id = :i",
                {"i": i},
            )
            assert [r[0] for r in stored] == [i], f"{i!r} is stored as {stored!r}"


# --- operation names ----------------------------------------------------------------------


@FUZZ
@given(
    name=st.one_of(
        TEXT,
        st.sampled_from(
            ["echo", "put", "peek", "calls", "_secret", "snapshot", "__class__", "__dict__", "mro"]
        ),
    )
)
def test_fuzzed_operation_names_are_unknown_unless_public_operations(
    rt: Runtime, name: str
) -> None:
    ref = rt.ref(Echo, "ops")
    if name in ("echo", "put", "peek"):
        assert callable(getattr(ref, name))
        return
    if name in dir(ref):
        return  # an attribute of the reference itself (snapshot, _runtime, __class__...)
    refused(rt, UnknownOperation, lambda: getattr(ref, name).send())
    refused(rt, UnknownOperation, lambda: getattr(ref, name)())


@pytest.mark.parametrize(
    "method",
    [print, Echo.__init_subclass__, lambda self: None, "echo", None, Echo.peek.__call__],
    ids=["builtin", "inherited", "lambda", "a-string", "none", "bound-call"],
)
def test_typed_call_with_a_foreign_callable_is_unknown_operation(rt: Runtime, method: Any) -> None:
    ref = rt.ref(Echo, "typed-call")
    refused(rt, UnknownOperation, lambda: ref.send(method))
    refused(rt, UnknownOperation, lambda: ref.call(method))


# --- idempotency keys and per-call options --------------------------------------------------


KEYS = st.one_of(
    TEXT,
    st.sampled_from(["k", "k ", "K", "order-1\u00a0"]),
    st.text(ANY_CHAR, min_size=MAX_ID_LENGTH - 1, max_size=MAX_ID_LENGTH + 1),
    st.integers(),
    st.binary(max_size=3),
)


@FUZZ
@given(key=KEYS, data=st.one_of(st.integers(), TEXT.filter(lambda s: not _has_surrogate(s))))
def test_fuzzed_idempotency_keys(rt: Runtime, key: Any, data: Any) -> None:
    """A valid key dedupes equal calls and refuses different ones, writing nothing more;
    keys that differ only in case or padding are different keys; bad keys are refused."""
    ref = rt.ref(Echo, f"idem-{next(SERIAL)}")
    if not valid_identifier(key):
        refused(rt, InvalidActorId, lambda: ref.echo.with_options(idempotency_key=key))
        return
    first = ref.echo.with_options(idempotency_key=key).send(data=data)
    before = counts(rt)
    again = ref.echo.with_options(idempotency_key=key).send(data=data)
    assert again.id == first.id
    assert counts(rt) == before
    refused(
        rt,
        IdempotencyConflict,
        lambda: ref.echo.with_options(idempotency_key=key).send(data=[data]),
    )
    for other in id_variants(key):
        if valid_identifier(other):
            assert ref.echo.with_options(idempotency_key=other).send(data=[data]).id != first.id
    rt.testing.drain()
    assert first.result() == data


OPTION_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.timedeltas(),
    st.sampled_from([True, "1", None, [1], Decimal("1"), MAX_DELAY_SECONDS, MAX_DELAY_SECONDS + 1]),
)


@FUZZ
@given(delay=OPTION_VALUES, timeout=OPTION_VALUES)
def test_fuzzed_delays_and_timeouts(rt: Runtime, delay: Any, timeout: Any) -> None:
    """A delay is a finite number of seconds (or timedelta) from 0 to MAX_DELAY_SECONDS and
    the message is due exactly that long after its database-clock enqueue; a timeout is
    any non-negative number; everything else is InvalidArguments, nothing written."""

    def seconds(value: Any, maximum: float) -> float | None:
        if value is None:
            return 0.0
        if isinstance(value, timedelta):
            value = value.total_seconds()
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            return None
        return float(value) if 0 <= value <= maximum else None

    ok_delay = seconds(delay, MAX_DELAY_SECONDS)
    ok_timeout = seconds(timeout, math.inf)
    handle = rt.ref(Echo, "delayed").echo
    if ok_delay is None or ok_timeout is None:
        refused(
            rt,
            InvalidArguments,
            lambda: handle.with_options(delay=delay, timeout=timeout).send(data=1),
        )
        return
    message = handle.with_options(delay=delay, timeout=timeout).send(data=1)
    with rt.store.read() as tx:
        status, available, created = tx.row(
            "SELECT status, available_at, created_at FROM solid_messages WHERE id = :id",
            {"id": message.id},
        )
    assert available - created == max(int(ok_delay * 1000), 0)
    assert status == ("scheduled" if int(ok_delay * 1000) > 0 else "queued")


RUNTIME_OPTIONS = st.sampled_from(sorted(f for f in Options.__dataclass_fields__))


@settings(FUZZ, max_examples=_examples(100))
@given(
    name=RUNTIME_OPTIONS,
    value=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(min_value=-(10**6), max_value=10**6),
        TEXT,
        st.none(),
        st.booleans(),
    ),
)
def test_fuzzed_runtime_options_are_valid_or_configuration_errors(
    db_url: str, name: str, value: Any
) -> None:
    """A runtime option either validates (and then derived values work) or raises
    ConfigurationError; never another exception, now or when the runtime uses it."""
    if name == "wakeup_url" or (name == "workers" and isinstance(value, int) and value > 64):
        assume(False)  # wakeup_url connects to Redis; thousands of threads are not input
    try:
        runtime = Runtime(db_url, **{name: value})
    except ConfigurationError:
        return
    try:
        options = runtime.options
        assert options.lease_ms >= 50
        for attempt in (1, 2, 50):
            assert math.isfinite(options.retry_delay(attempt))
    finally:
        runtime.close()


# --- the asyncio face --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attempt, error",
    [
        (lambda r: r.echo.send(data=[math.nan]), InvalidArguments),
        (lambda r: r.echo.send(data="x" * (LIMIT + 1)), PayloadTooLarge),
        (lambda r: r.echo.send(data={"\udc80": 1}), InvalidArguments),
        (lambda r: r.echo.with_options(delay=math.inf).send(data=1), InvalidArguments),
        (lambda r: r.echo.with_options(idempotency_key="k\x00").send(data=1), InvalidActorId),
        (lambda r: r.nope.send(), UnknownOperation),
        (lambda r: r.peek.send(), UnknownOperation),
    ],
    ids=["nan", "too-large", "surrogate-key", "infinite-delay", "nul-key", "unknown", "query"],
)
def test_async_face_refuses_the_same_inputs_and_writes_nothing(
    db_url: str, attempt: Callable[[Any], Any], error: type[Exception]
) -> None:
    async def main() -> None:
        runtime = AsyncRuntime(db_url, workers=0, max_payload_bytes=LIMIT, **FAST)
        await runtime.install()
        try:
            ref = runtime.ref(Echo, "async")
            before = counts(runtime.sync)
            with pytest.raises(error):
                await attempt(ref)
            with pytest.raises(InvalidActorId):
                await runtime.ref(Echo, "bad\n").echo.send(data=1)
            assert counts(runtime.sync) == before
            sent = await ref.echo.send(data={"ok": [1.5, "\u00e9"]})
            await runtime.testing.drain()
            assert await sent.result() == {"ok": [1.5, "\u00e9"]}
        finally:
            await runtime.close()

    asyncio.run(main())


# --- the command line ------------------------------------------------------------------------


ROOT = Path(__file__).resolve().parents[1]
TARGET = "tests.apps.admin_app:runtime"


@dataclass
class Outcome:
    args: tuple[str | bytes, ...]
    code: int
    stdout: str
    stderr: str


def run_cli(url: str, tmp_path: Path, args: tuple[str | bytes, ...], stdin: str = "") -> Outcome:
    env = {
        **os.environ,
        "SOLID_ADMIN_APP_DB": url,
        "SOLID_ADMIN_APP_RATES": str(tmp_path / "rates.json"),
        "SOLID_ADMIN_APP_OUTAGE": str(tmp_path / "outage"),
        "SOLID_ADMIN_APP_POLICY": "all",
    }
    env["PYTHONPATH"] = str(ROOT / "src")  # this checkout's package, not the venv's
    done = subprocess.run(
        [sys.executable, "-m", "solid_objects", *args],
        cwd=ROOT,
        env=env,
        input=stdin.encode("utf-8", "surrogateescape"),
        capture_output=True,
        timeout=60,
    )
    return Outcome(
        args,
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
    )


#: Strings an operator (or a script fed untrusted ids) might pass. argv cannot carry
#: NUL, so bytes that are not UTF-8 stand in for lone surrogates (Python decodes
#: them to U+DC80..U+DCFF).
CLI_STRINGS: list[str | bytes] = [
    "'; DROP TABLE solid_messages; --",
    "%s%%(x)s:x?",
    "\\",
    "x" * 5000,
    "\u202e🎉\ufeff",
    "e\u0301",
    "line\nbreak",
    "\t",
    " ",
    "Account ",
    b"\xff\xfe",
    b"acct-\x80",
    "-",
    "--json",
]


CliCase = tuple[tuple[str | bytes, ...], str]


def cli_cases(values: list[str | bytes], per_value: int) -> list[CliCase]:
    """(argv, stdin) pairs putting each value into ``per_value`` kinds of argument, in
    rotation, so every position meets many values without a process per pair."""
    positions: list[Callable[[str | bytes], CliCase]] = [
        lambda v: (("inspect", TARGET, "Account", v, "--json"), ""),
        lambda v: (("dead-letters", "show", TARGET, v), ""),
        lambda v: (("dead-letters", "list", TARGET, "--type", v, "--id", v, "--operation", v), ""),
        lambda v: (("dead-letters", "list", TARGET, "--cursor", v), ""),
        lambda v: (("inspect", TARGET, v, "acct-1"), ""),
        lambda v: (("effects", "retry", TARGET, v, "--reason", v), ""),
        lambda v: (("actors", TARGET, v), ""),
        lambda v: (("audit", TARGET, "--target-id", v, "--principal", v), ""),
        lambda v: (
            ("dead-letters", "discard", TARGET, "-"),
            v + "\n" + v if isinstance(v, str) else v.decode("utf-8", "surrogateescape"),
        ),
    ]
    return [
        positions[(i + j) % len(positions)](v)
        for i, v in enumerate(values)
        for j in range(per_value)
    ]


def check_cli_outcomes(outcomes: list[Outcome]) -> None:
    """No traceback; 0, 1 (failed: not found, refused) or 2 (bad usage) with the
    message on stderr; a failure prints nothing on stdout."""
    wrong = []
    for o in outcomes:
        if (
            o.code not in (0, 1, 2)
            or "Traceback" in o.stderr
            or (o.code != 0 and (o.stdout or "error" not in o.stderr.lower()))
        ):
            wrong.append(f"{o.args!r}: exit {o.code}\n  stdout {o.stdout!r}\n  stderr {o.stderr!r}")
    assert not wrong, "\n".join(wrong)


@pytest.fixture
def cli_app(db_url: str, tmp_path: Path) -> Iterator[Runtime]:
    """The admin app's database with one actor and one dead letter, as the CLI sees it."""
    from tests.apps.admin_app import Account, build_runtime

    (tmp_path / "rates.json").write_text('{"EUR": 1}')
    rt = build_runtime(db_url, workers=0)
    rt.install()
    rt.ref(Account, "acct-1").deposit.send(amount=1)
    rt.ref(Account, "acct-1").deposit.send(amount=1, currency="XXX")
    for _ in range(200):
        rt.testing.drain()
        with rt.store.read() as tx:
            if tx.scalar("SELECT COUNT(*) FROM solid_messages WHERE status = 'dead'"):
                break
    try:
        yield rt
    finally:
        rt.close()


def writes(rt: Runtime) -> dict[str, int]:
    with rt.store.read() as tx:
        return {
            t: int(tx.scalar(f"SELECT COUNT(*) FROM solid_{t}"))
            for t in ("actors", "messages", "effects", "audit", "resolutions")
        }


@pytest.mark.slow
def test_cli_hostile_arguments_fail_cleanly_and_write_nothing(
    cli_app: Runtime, db_url: str, tmp_path: Path, backend: str
) -> None:
    """Every hostile string in every argument position, as real processes on SQLite; a
    sample on the servers (each command is a process start)."""
    values = CLI_STRINGS if backend == "sqlite" else CLI_STRINGS[::3]
    before = writes(cli_app)
    cases = [
        (("dead-letters", "list", TARGET, "--cursor", values[0]), ""),
        (("dead-letters", "show", TARGET, values[0]), ""),
        (("inspect", TARGET, "Account", "line\nbreak", "--json"), ""),
        (("inspect", TARGET, "Account", b"acct-\x80", "--json"), ""),
        *cli_cases(values, 1),
    ]
    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(lambda c: run_cli(db_url, tmp_path, c[0], c[1]), cases))
    check_cli_outcomes(outcomes)
    assert writes(cli_app) == before, "a refused command wrote something"
    # usage errors are usage errors: an unparseable cursor or an id with a control
    # character exits 2, an unknown id exits 1
    by_args = {o.args: o for o in outcomes}
    assert by_args[("dead-letters", "list", TARGET, "--cursor", values[0])].code == 2
    assert by_args[("dead-letters", "show", TARGET, values[0])].code == 1
    assert by_args[("inspect", TARGET, "Account", "line\nbreak", "--json")].code == 2
    assert by_args[("inspect", TARGET, "Account", b"acct-\x80", "--json")].code == 2
    # and the database still serves the CLI and the runtime
    shown = run_cli(db_url, tmp_path, ("inspect", TARGET, "Account", "acct-1", "--json"))
    assert shown.code == 0 and json.loads(shown.stdout)["state"]["balance"] == 1
