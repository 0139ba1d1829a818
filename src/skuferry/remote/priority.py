"""Which sends are urgent: a property of the thread that sends them.

The writer marks the threads that carry an urgent write (a key pushed by a hook,
a price changed in a new export, ``sync --only`` from another shell); the budget
reads the mark when that thread asks for a token (``Budget.acquire``). A thread
carries the mark only inside ``urgent()``, so the client, its retries and the
lookups of that write are all urgent, and nothing else is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

_marks = threading.local()
P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def urgent() -> Iterator[None]:
    """Within this block, this thread's sends are urgent."""
    before = getattr(_marks, "urgent", False)
    _marks.urgent = True
    try:
        yield
    finally:
        _marks.urgent = before


def is_urgent() -> bool:
    """Whether this thread is sending an urgent write now."""
    return bool(getattr(_marks, "urgent", False))


def urgently(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run with this mark, in whichever thread calls it (a pool's worker)."""

    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        with urgent():
            return fn(*args, **kwargs)

    return call
