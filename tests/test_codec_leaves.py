"""The codec's shortcuts for plain leaves and ASCII text refuse exactly what the full
checks refuse (the warm-call CPU work)."""

from __future__ import annotations

from typing import Any

import pytest

from solid_objects.codec import canonical_json, encode_json, reject_non_finite
from solid_objects.errors import InvalidArguments, PayloadTooLarge


def _nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


@pytest.mark.parametrize("leaf", [0, "s", True, None])
def test_a_leaf_one_level_too_deep_is_refused(leaf: Any) -> None:
    reject_non_finite(_nested(200, leaf), what="x")  # the leaf sits at depth 200
    with pytest.raises(InvalidArguments, match="nested more than 200"):
        reject_non_finite(_nested(201, leaf), what="x")
    with pytest.raises(InvalidArguments, match="nested more than 200"):
        reject_non_finite({"k": _nested(200, leaf)}, what="x")


def test_non_finite_values_and_keys_below_plain_leaves_are_refused() -> None:
    with pytest.raises(InvalidArguments, match="nan"):
        reject_non_finite({"a": 1, "b": [1, "x", None, float("nan")]}, what="x")
    with pytest.raises(InvalidArguments, match="inf"):
        reject_non_finite({float("inf"): 1}, what="x")
    with pytest.raises(InvalidArguments, match="same in JSON"):
        reject_non_finite({1: "a", "1": "b"}, what="x")


def test_canonical_json_is_sorted_compact_and_refuses_nan() -> None:
    assert canonical_json({"b": [1, "é"], "a": None}) == '{"a":null,"b":[1,"é"]}'
    assert [canonical_json(v) for v in (5, -(10**30), True, 1.5)] == [
        "5",
        "-" + "1" + "0" * 30,
        "true",
        "1.5",
    ]
    with pytest.raises(ValueError):
        canonical_json(float("nan"))


def test_size_is_counted_in_utf8_bytes_before_a_lone_surrogate_is_refused() -> None:
    assert encode_json("é", what="x", limit=4) == '"é"'  # 4 bytes in UTF-8
    with pytest.raises(PayloadTooLarge, match="4 bytes"):
        encode_json("é", what="x", limit=3)
    with pytest.raises(PayloadTooLarge, match="5 bytes"):
        encode_json("\ud800", what="x", limit=4)  # too large wins over the surrogate
    with pytest.raises(InvalidArguments, match="lone surrogate"):
        encode_json("\ud800", what="x", limit=5)
