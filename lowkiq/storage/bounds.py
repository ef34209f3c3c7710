"""Validation of query bounds, so Redis never answers a caller with a raw ResponseError.

Id bounds use Redis lex syntax (``-``, ``+``, ``[x``, ``(x``) and are mapped onto
members of the form ``id\\0blob``; numeric bounds accept numbers, ``-inf``,
``+inf`` and an exclusive ``(x``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lowkiq.errors import InvalidQuery


def check_limit(limit: Any) -> int:
    """A page size: a non-negative int."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise InvalidQuery(f"limit must be a non-negative integer, got {limit!r}")
    return limit


def member_bound(bound: Any, role: str) -> str:
    """Map an id bound onto ``id\\0blob`` members; ``role`` is ``"min"`` or ``"max"``."""
    if not isinstance(bound, str) or not (bound in ("-", "+") or bound[:1] in ("[", "(")):
        raise InvalidQuery(f"id bound must be '-', '+', '[id' or '(id', got {bound!r}")
    if "\0" in bound:
        raise InvalidQuery("id bound must not contain NUL")
    if bound in ("-", "+"):
        return bound
    inclusive, value = bound[0] == "[", bound[1:]
    if role == "min":
        return f"[{value}" if inclusive else f"[{value}\x01"
    return f"({value}\x01" if inclusive else f"({value}"


@dataclass(frozen=True)
class ScoreBound:
    """A numeric bound: its value and whether it is exclusive."""

    value: float
    exclusive: bool = False

    @property
    def redis(self) -> str:
        """The bound as Redis expects it in ZRANGEBYSCORE."""
        if math.isinf(self.value):
            return "+inf" if self.value > 0 else "-inf"
        return ("(" if self.exclusive else "") + repr(self.value)

    @property
    def complement(self) -> str:
        """As a minimum, the ZCOUNT max that counts exactly the values below the range."""
        return repr(self.value) if self.exclusive else f"({self.value!r}"

    def admits_from_below(self, value: float) -> bool:
        """As a minimum, whether ``value`` is inside the range."""
        return value > self.value or (value == self.value and not self.exclusive)

    def admits_from_above(self, value: float) -> bool:
        """As a maximum, whether ``value`` is inside the range."""
        return value < self.value or (value == self.value and not self.exclusive)


def score_bound(bound: Any) -> ScoreBound:
    """Parse a numeric bound: a number, ``"-inf"``, ``"+inf"``, ``"1.5"`` or ``"(1.5"``."""
    exclusive = False
    value = bound
    if isinstance(bound, str):
        exclusive = bound.startswith("(")
        text = bound[1:] if exclusive else bound
        try:
            value = float(text)
        except ValueError:
            raise InvalidQuery(f"numeric bound must be a number or ±inf, got {bound!r}") from None
    elif isinstance(bound, bool) or not isinstance(bound, (int, float)):
        raise InvalidQuery(f"numeric bound must be a number or ±inf, got {bound!r}")
    try:
        value = float(value)
    except OverflowError:
        raise InvalidQuery(f"numeric bound is too large for a float, use ±inf: {bound!r}") from None
    if math.isnan(value):
        raise InvalidQuery("numeric bound must not be NaN")
    return ScoreBound(value, exclusive)
