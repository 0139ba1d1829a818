"""Seeded fault injection: the ways a write can go wrong between client and store.

Each write the faults apply to draws one number from a ``random.Random(seed)``
and gets at most one fault, chosen by the cumulative probabilities below in a
fixed order, so a given seed and request sequence replays the same faults.

``drop_after_commit``    stored, then the socket is closed with no response
``error_after_commit``   stored, then 500 (the client cannot know it landed)
``error_before_commit``  500, nothing stored
``reset``                TCP RST before the body is read, nothing stored
``slow_after_commit``    stored, then the answer waits ``slow_s`` (client times out)

``latency_s`` delays every response; ``garbage`` makes every API response a 502
HTML page (``"html"``) or truncated JSON (``"json"``). Rate limiting runs first
and is never faked: a 429 is always an honest 429.

The list pages of ``GET /api/v1/products`` draw from the same generator, one number
per page, and get at most one of these (the list pages serve them):

``list_empty``          the page answers ``[]`` (meta.pages as usual)
``list_short``          a page before the last holds one product fewer than it should
``list_repeated``       the page before it is served again (same ids twice)
``list_shifted``        a product before the page was deleted mid-walk: every product
                        moves one place forward, so one slips past the reader unseen
                        (and meta counts one fewer). Nothing is really deleted.
``list_pages_changed``  meta.pages is one more than the products fill

``list_page`` (0: every page) draws list faults for that page number only, so "page 2
of 3 comes back empty" can be asked for exactly. ``list_lag_s`` makes the list lag
behind writes: a product appears on list pages this many seconds after it was
created; a GET by id sees it at once.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from decimal import Decimal
from typing import Any, Literal, TypeVar

from skuferry.errors import UsageError

FaultKind = Literal[
    "drop_after_commit",
    "error_after_commit",
    "error_before_commit",
    "reset",
    "slow_after_commit",
]
FAULT_KINDS: tuple[FaultKind, ...] = (
    "drop_after_commit",
    "error_after_commit",
    "error_before_commit",
    "reset",
    "slow_after_commit",
)
Garbage = Literal["html", "json"]
# product_writes: POST/PUT/PATCH on products; writes: any write-tier request; all: every request
FaultScope = Literal["product_writes", "writes", "all"]
_SCOPES = ("product_writes", "writes", "all")
ListFaultKind = Literal[
    "list_empty", "list_short", "list_repeated", "list_shifted", "list_pages_changed"
]
LIST_FAULT_KINDS: tuple[ListFaultKind, ...] = (
    "list_empty",
    "list_short",
    "list_repeated",
    "list_shifted",
    "list_pages_changed",
)
K = TypeVar("K", FaultKind, ListFaultKind)


@dataclass(frozen=True, slots=True)
class Faults:
    """What to break, and how often (probabilities per eligible request)."""

    drop_after_commit: float = 0.0
    error_after_commit: float = 0.0
    error_before_commit: float = 0.0
    reset: float = 0.0
    slow_after_commit: float = 0.0
    slow_s: float = 5.0
    latency_s: float = 0.0
    garbage: Garbage | None = None
    scope: FaultScope = "product_writes"
    list_empty: float = 0.0
    list_short: float = 0.0
    list_repeated: float = 0.0
    list_shifted: float = 0.0
    list_pages_changed: float = 0.0
    list_lag_s: float = 0.0
    list_page: int = 0

    def __post_init__(self) -> None:
        for kinds, what in ((FAULT_KINDS, "fault"), (LIST_FAULT_KINDS, "list fault")):
            for kind in kinds:
                p = getattr(self, kind)
                if not 0.0 <= p <= 1.0:
                    raise UsageError(f"fault probability {kind}={p} is not between 0 and 1")
            if sum(getattr(self, kind) for kind in kinds) > 1.0 + 1e-9:
                raise UsageError(f"{what} probabilities add up to more than 1")
        if self.slow_s < 0 or self.latency_s < 0 or self.list_lag_s < 0 or self.list_page < 0:
            raise UsageError("slow_s, latency_s, list_lag_s and list_page must not be negative")
        if self.garbage not in (None, "html", "json"):
            raise UsageError(f"garbage must be 'html', 'json' or null, not {self.garbage!r}")
        if self.scope not in _SCOPES:
            raise UsageError(f"fault scope must be one of {_SCOPES}, not {self.scope!r}")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Faults:
        """Build from a JSON object (the admin endpoint); unknown names are refused."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UsageError(f"unknown fault settings: {', '.join(unknown)}")
        values: dict[str, Any] = {}
        for name, value in data.items():
            if name in ("garbage", "scope"):
                values[name] = value
            elif isinstance(value, bool) or not isinstance(value, int | float | Decimal | str):
                raise UsageError(f"fault setting {name} must be a number")
            elif name == "list_page":
                try:
                    values[name] = int(value)
                except ValueError as exc:
                    raise UsageError("fault setting list_page must be a whole number") from exc
            else:
                try:
                    values[name] = float(value)
                except ValueError as exc:
                    raise UsageError(f"fault setting {name} must be a number") from exc
        return cls(**values)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


class FaultPicker:
    """Draws faults from one seeded generator; safe to call from many threads."""

    def __init__(self, faults: Faults, *, seed: int) -> None:
        self._faults = faults
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    @property
    def faults(self) -> Faults:
        return self._faults

    def set(self, faults: Faults) -> None:
        # The generator carries on: a new setting does not replay old draws.
        self._faults = faults

    def reseed(self, seed: int) -> None:
        with self._lock:
            self._rng.seed(seed)

    def pick(self, *, is_write: bool, is_product_write: bool) -> FaultKind | None:
        """The fault for one request, or None; draws only for eligible requests."""
        faults = self._faults
        eligible = {
            "product_writes": is_product_write,
            "writes": is_write,
            "all": True,
        }[faults.scope]
        if not eligible or not any(getattr(faults, kind) for kind in FAULT_KINDS):
            return None
        return self._draw(FAULT_KINDS)

    def pick_list(self, page: int) -> ListFaultKind | None:
        """The fault for list page ``page`` of the products, or None; draws only for the
        pages faults apply to."""
        faults = self._faults
        if not any(getattr(faults, kind) for kind in LIST_FAULT_KINDS):
            return None
        if faults.list_page and page != faults.list_page:
            return None
        return self._draw(LIST_FAULT_KINDS)

    def _draw(self, kinds: tuple[K, ...]) -> K | None:
        """One draw against the kinds' probabilities in turn: one fault at most."""
        with self._lock:
            draw = self._rng.random()
        threshold = 0.0
        for kind in kinds:
            threshold += getattr(self._faults, kind)
            if draw < threshold:
                return kind
        return None
