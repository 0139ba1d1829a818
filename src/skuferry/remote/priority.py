"""Which sends are urgent: a mark on the thread that sends them.

The writer marks the threads that carry an urgent write (a key pushed by a hook,
a price changed in a new export, ``sync --only`` from another shell); the budget
reads the mark each time that thread asks for a token (``Budget.acquire``). A
thread carries a mark only while it runs a marked call, so the client, its
retries and the lookups of that write are all urgent, and nothing else is.

A mark may be raised while its write waits: a backlog write of a product the
urgent lane wants (the lane waits for its answer) becomes urgent itself. Such a
waiting write waits on its mark (``raised``), not on a clock: it looks at the budget
again when its turn comes or the mark is raised, whichever is first. A stop reaches it
the same way: whoever stops the writes wakes their marks (``wake``), so a wait for the
budget needs no clock to notice a stop either.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import ParamSpec, TypeVar

_marks = threading.local()
P = ParamSpec("P")
R = TypeVar("R")


class Mark:
    """Whether one write is urgent; raised from another thread with ``raise_``."""

    def __init__(self, urgent: bool = False) -> None:
        self.urgent = urgent
        self.raised = threading.Event()  # set once urgent: a waiting send looks again
        if urgent:
            self.raised.set()

    def raise_(self) -> None:
        self.urgent = True
        self.raised.set()

    def wake(self) -> None:
        """The send waiting under this mark looks again now, urgent or not (a stop: it
        finds the stop and gives up). A wake of a send that goes on waiting is spent."""
        self.raised.set()


def current() -> Mark | None:
    """This thread's mark, if it runs a marked call."""
    found: Mark | None = getattr(_marks, "mark", None)
    return found


@contextmanager
def marked(mark: Mark) -> Iterator[None]:
    """Within this block, this thread's sends are as urgent as ``mark`` says."""
    before = current()
    _marks.mark = mark
    try:
        yield
    finally:
        _marks.mark = before


def urgent() -> AbstractContextManager[None]:
    """Within this block, this thread's sends are urgent."""
    return marked(Mark(urgent=True))


def is_urgent() -> bool:
    """Whether this thread is sending an urgent write now."""
    mark = current()
    return mark is not None and mark.urgent


def with_mark(fn: Callable[P, R], mark: Mark) -> Callable[P, R]:
    """``fn`` run under ``mark``, in whichever thread calls it (a pool's worker)."""

    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        with marked(mark):
            return fn(*args, **kwargs)

    return call
