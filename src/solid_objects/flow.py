"""Flow control for effects: how fast and how many, over every process.

Declared where a handler is registered (``@runtime.effect(name, rate=Rate(10, per=1.0),
max_concurrent=3)``); enforced by the database inside the claim's transaction (see
``store/effect_limits.py``), so the limits hold across processes and hosts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``count`` starts of an effect in any window of ``per`` seconds.

    A start is a claim of an attempt (a retry is a start too), counted over every
    process by the database's clock. ``Rate(10, per=1.0)``: ten per second.
    """

    count: int
    per: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ConfigurationError(f"Rate count must be a positive integer, not {self.count!r}")
        if (
            isinstance(self.per, bool)
            or not isinstance(self.per, int | float)
            or not math.isfinite(self.per)
            or int(self.per * 1000) < 1
        ):
            raise ConfigurationError(
                f"Rate per must be a positive number of seconds (1 ms or more), not {self.per!r}"
            )

    @property
    def per_ms(self) -> int:
        return int(self.per * 1000)


@dataclass(frozen=True, slots=True)
class EffectLimits:
    """The limits one process declares for one effect name (None: no such limit)."""

    rate: Rate | None = None
    max_concurrent: int | None = None

    @property
    def any(self) -> bool:
        return self.rate is not None or self.max_concurrent is not None


def effect_limits(name: str, rate: Rate | None, max_concurrent: int | None) -> EffectLimits:
    """Check the arguments of ``runtime.effect``: a clear error before anything runs."""
    if rate is not None and not isinstance(rate, Rate):
        raise ConfigurationError(f"rate of effect {name!r} must be a Rate, not {rate!r}")
    if max_concurrent is not None and (
        isinstance(max_concurrent, bool)
        or not isinstance(max_concurrent, int)
        or max_concurrent < 1
    ):
        raise ConfigurationError(
            f"max_concurrent of effect {name!r} must be a positive integer, not {max_concurrent!r}"
        )
    return EffectLimits(rate, max_concurrent)
