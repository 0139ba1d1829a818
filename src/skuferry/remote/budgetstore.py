"""What the budget needs from the place that keeps its ledger, shared by every process.

The budget (``Budget``) decides what may be sent when; this is the ledger it decides
on: per scope (a key's tier, or the workspace's) one bucket row and a log of sends, and
the learnt paces as named ``meta`` values. The state file implements it (the state
package's budget book); a sync builds that and hands it to the budget, so the pacing
policy here never opens a file itself.

A store runs each decision as one transaction: ``transact`` calls ``body`` with the
rows of one consistent view, and what ``body`` wrote is kept only if it returns.
Bodies of one store run one at a time (the writer threads share it), and a store
shared by processes makes theirs take turns too: while another holds the ledger,
``transact`` waits and tries again, and raises ``Interrupted`` when ``stop`` is set
meanwhile, ``StateError`` when the ledger fails or stays taken.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol, TypeVar

T = TypeVar("T")

# One scope's bucket: (tokens, updated_at, blocked_until), epoch seconds. The window
# limiter keeps only blocks here; the bucket limiter its tokens as of ``updated_at``.
Bucket = tuple[float, float, float]


class BudgetRows(Protocol):
    """The ledger inside one transaction of ``BudgetStore.transact``."""

    def bucket(self, scope: str) -> Bucket | None:
        """The scope's bucket, None when it has none yet."""
        ...

    def put_tokens(self, scope: str, tokens: float, updated_at: float) -> None:
        """Set the scope's tokens (a new bucket is not blocked; an old one stays as it was)."""
        ...

    def put_bucket(self, scope: str, bucket: Bucket) -> None:
        """Set the whole bucket, block included."""
        ...

    def add_send(self, scope: str, at: float) -> None:
        """Log one send of the scope at ``at``."""
        ...

    def logged(self, scope: str) -> int:
        """The scope's sends in the log, or more (never fewer), at the cost of a look-up,
        not a count: after ``forget_sends(until)``, an upper bound of those after ``until``."""
        ...

    def set_logged(self, scope: str, count: int) -> None:
        """The scope's sends in the log, counted exactly (``logged`` gives it back)."""
        ...

    def count_sends(self, scope: str, since: float) -> int:
        """Sends of the scope logged after ``since`` (strictly)."""
        ...

    def sends(self, scope: str, since: float) -> list[float]:
        """Times of the scope's sends after ``since`` (strictly), in no particular order."""
        ...

    def send_at(self, scope: str, since: float, index: int) -> float:
        """The time of the ``index``-th (from 0) oldest send after ``since``; it must exist."""
        ...

    def forget_sends(self, scope: str, until: float) -> None:
        """Drop the scope's sends logged at or before ``until``."""
        ...

    def metas(self, prefix: str) -> list[tuple[str, str]]:
        """``(rest of name, value)`` of each named value whose name starts with ``prefix``
        (none when they cannot be read: they are advice, not the ledger)."""
        ...

    def put_meta(self, name: str, value: str) -> None:
        """Set the named value."""
        ...


class BudgetStore(Protocol):
    """The budget's ledger; the budget owns it once given it, and closes it."""

    def transact(
        self,
        body: Callable[[BudgetRows], T],
        *,
        write: bool = True,
        stop: threading.Event | None = None,
    ) -> T:
        """``body``'s result, run in one transaction (``write=False``: it only reads)."""
        ...

    def close(self) -> None:
        """Let the ledger go; closing twice is harmless."""
        ...
