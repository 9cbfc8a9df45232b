"""A bounded memo of pure results, shared by the hot paths of the core (policy maps, plans,
audit-record texts, hashes): a memo past its limit is cleared, so a miss only recomputes."""
from __future__ import annotations

from typing import Any, TypeVar

V = TypeVar("V")


def remember(memo: dict[Any, Any], key: Any, value: V, limit: int) -> V:
    """``memo[key] = value`` (cleared first when it holds more than ``limit`` entries); returns ``value``."""
    if len(memo) > limit:
        memo.clear()
    memo[key] = value
    return value
