"""What the sandbox saw, so tests and benchmarks can judge a client by its traffic.

Times are seconds since the sandbox started, on the sandbox's clock. An *early
retry* is a request of a key and tier that arrives before the ``Retry-After``
of that key and tier's last 429 has passed; ``early_by_s`` says by how much.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class EarlyRetry:
    key: str
    tier: str
    at_s: float
    early_by_s: float


@dataclass(frozen=True)
class SandboxStats:
    """A snapshot; plain data, safe to keep and compare."""

    requests: dict[str, int] = field(default_factory=dict)  # by tier
    requests_by_key: dict[str, dict[str, int]] = field(default_factory=dict)  # key -> tier -> n
    responses: dict[int, int] = field(default_factory=dict)  # by status
    rate_limited: dict[str, int] = field(default_factory=dict)  # 429s by tier
    rate_limited_by_key: dict[str, dict[str, int]] = field(default_factory=dict)
    writes_committed: int = 0  # product and content writes that changed the store
    products: dict[str, int] = field(default_factory=dict)  # per workspace
    duplicates: dict[str, dict[str, int]] = field(default_factory=dict)  # ws -> key -> n (>1)
    faults: dict[str, int] = field(default_factory=dict)  # injected, by kind
    early_retries: tuple[EarlyRetry, ...] = ()
    write_times: tuple[float, ...] = ()  # each write admitted by the rate limiter

    def as_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "requests_by_key": self.requests_by_key,
            "responses": {str(status): n for status, n in self.responses.items()},
            "rate_limited": self.rate_limited,
            "rate_limited_by_key": self.rate_limited_by_key,
            "writes_committed": self.writes_committed,
            "products": self.products,
            "duplicates": self.duplicates,
            "faults": self.faults,
            "early_retries": [
                {"key": e.key, "tier": e.tier, "at_s": e.at_s, "early_by_s": e.early_by_s}
                for e in self.early_retries
            ],
            "write_times": list(self.write_times),
        }


class StatsRecorder:
    """Thread-safe counters; ``snapshot`` adds the store's view (counts, duplicates)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        with self._lock:
            self._requests: Counter[str] = Counter()
            self._by_key: dict[str, Counter[str]] = {}
            self._responses: Counter[int] = Counter()
            self._limited: Counter[str] = Counter()
            self._limited_by_key: dict[str, Counter[str]] = {}
            self._committed = 0
            self._faults: Counter[str] = Counter()
            self._early: list[EarlyRetry] = []
            self._write_times: list[float] = []
            self._retry_deadline: dict[tuple[str, str], float] = {}

    def arrived(self, *, tier: str, key: str | None, at_s: float) -> None:
        """Count a request; for a known key, note it if it comes before its Retry-After."""
        with self._lock:
            self._requests[tier] += 1
            if key is None:
                return
            self._by_key.setdefault(key, Counter())[tier] += 1
            deadline = self._retry_deadline.get((key, tier))
            if deadline is not None and at_s < deadline:
                self._early.append(EarlyRetry(key, tier, at_s, deadline - at_s))

    def limited(self, *, tier: str, key: str, at_s: float, retry_after: int) -> None:
        with self._lock:
            self._limited[tier] += 1
            self._limited_by_key.setdefault(key, Counter())[tier] += 1
            self._retry_deadline[(key, tier)] = at_s + retry_after

    def admitted_write(self, at_s: float) -> None:
        with self._lock:
            self._write_times.append(at_s)

    def committed(self) -> None:
        with self._lock:
            self._committed += 1

    def responded(self, status: int) -> None:
        with self._lock:
            self._responses[status] += 1

    def fault(self, kind: str) -> None:
        with self._lock:
            self._faults[kind] += 1

    def snapshot(
        self, *, products: dict[str, int], duplicates: dict[str, dict[str, int]]
    ) -> SandboxStats:
        with self._lock:
            return SandboxStats(
                requests=dict(self._requests),
                requests_by_key={k: dict(c) for k, c in self._by_key.items()},
                responses=dict(sorted(self._responses.items())),
                rate_limited=dict(self._limited),
                rate_limited_by_key={k: dict(c) for k, c in self._limited_by_key.items()},
                writes_committed=self._committed,
                products=products,
                duplicates=duplicates,
                faults=dict(self._faults),
                early_retries=tuple(self._early),
                write_times=tuple(self._write_times),
            )
