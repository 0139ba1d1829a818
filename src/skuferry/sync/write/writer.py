"""Sending creates and updates through a small bounded pool, journalled in the mirror.

Only the calling thread touches the mirror: each write commits its journal, a
worker makes its request, and the write commits its outcome when the future
completes. The workers only talk HTTP (their pace is set by the shared budget
inside the client, not by the pool): ``max_in_flight`` requests overlap their
latency.

What each kind of write sends and records (success, refusal, an unknown outcome)
is the write's own business (``actions.Write``); the writer runs them, sends the
first PATCH/PUT alone (so a server lacking the method costs one request), and
keeps what they leave open for the run to settle before it ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, cast, overload

from skuferry import errors
from skuferry.models import Action, Product, RunSummary
from skuferry.state.mirror import Mirror
from skuferry.sync.write.actions import Write, WriteContext
from skuferry.sync.write.doubt import Doubts
from skuferry.sync.write.fields import Ownership
from skuferry.sync.write.gone import GonePolicy
from skuferry.sync.write.updates import Updater

if TYPE_CHECKING:
    from skuferry.remote.client import RemoteApi  # a type; importing httpx costs ~0.1 s


T = TypeVar("T")


class _OfContext(Generic[T]):
    """An attribute of the writer that is its write context's: read and set there, so the
    writes and the callers that settle what they leave open share one list."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, writer: None, owner: type) -> _OfContext[T]: ...
    @overload
    def __get__(self, writer: Writer, owner: type) -> T: ...
    def __get__(self, writer: Writer | None, owner: type) -> T | _OfContext[T]:
        return self if writer is None else cast(T, getattr(writer.context, self.name))

    def __set__(self, writer: Writer, value: T) -> None:
        setattr(writer.context, self.name, value)


class Writer:
    # What the writes leave open, for the run to settle before it ends: creates whose
    # outcome is unknown (their intent stays open for a lookup), products whose remote id
    # answered 404, PATCH/PUT writes whose answer was lost (read back); and what ends
    # the run once the writes stop.
    unknown: _OfContext[list[Product]] = _OfContext()
    missing: _OfContext[list[Product]] = _OfContext()
    unsettled: _OfContext[list[Action]] = _OfContext()
    fatal: _OfContext[errors.SkuferryError | None] = _OfContext()
    summary: _OfContext[RunSummary] = _OfContext()  # the run's: counts and problems go there
    doubts: _OfContext[Doubts] = _OfContext()
    clock: _OfContext[Callable[[], float]] = _OfContext()
    # Whether the server accepted a PATCH/PUT in this run (until then each goes alone).
    updates_confirmed: _OfContext[bool] = _OfContext()

    def __init__(
        self,
        client: RemoteApi,
        mirror: Mirror,
        *,
        run_id: int | None,
        update_method: Literal["patch", "put", "none"],
        max_in_flight: int,
        stop: threading.Event | None = None,
        on_done: Callable[[], None] | None = None,
        ownership: Ownership | None = None,
        gone: GonePolicy | None = None,
        summary: RunSummary | None = None,
        doubts: Doubts | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._max = max_in_flight
        self._stop = stop or threading.Event()
        self._on_done = on_done or (lambda: None)
        gone = gone or GonePolicy()
        self.ownership = ownership or Ownership()
        updater = Updater(
            client,
            method="put" if update_method == "put" else "patch",
            ownership=self.ownership,
            policy=gone,
        )
        self.context = WriteContext(
            client=client,
            mirror=mirror,
            summary=summary or RunSummary(),
            updater=updater,
            gone=gone,
            # When each create went out and came back, or was lost: what the list must
            # show before a create in doubt is settled by its absence.
            doubts=doubts if doubts is not None else Doubts(bound_s=0.0),
            clock=clock,
            run_id=run_id,
            method=update_method,
        )

    def write_of(self, action: Action) -> Write[Any]:
        """The write that carries ``action`` out in this run."""
        return Write.of(action, self.context)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set() or self.fatal is not None

    # Urgent writes that may not wait for room in the pool (a subclass's): they go to
    # ``spare`` extra workers while the pool's own wait for the budget.
    spare = 0
    express_poll_s = 0.25

    def express(self) -> list[Action]:
        return []

    def superseded(self, action: Action) -> bool:
        """Whether ``action``, held while waiting for room, was replaced meanwhile."""
        return False

    def run(self, actions: Iterable[Action]) -> None:
        pending: set[Future[Any]] = set()
        jobs: dict[Future[Any], Write[Any]] = {}
        workers = self._max + self.spare
        context = self.context
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="skuferry-write") as pool:
            for action in actions:
                if self.stopped:
                    break
                while len(pending) >= self._max:
                    done, pending = wait(
                        pending,
                        timeout=self.express_poll_s if self.spare else None,
                        return_when=FIRST_COMPLETED,
                    )
                    for fut in done:
                        self._finish(jobs.pop(fut), fut)
                    for urgent in [] if self.stopped else self.express():
                        express = self.write_of(urgent)
                        if (sent := self._submit(pool, express)) is not None:
                            jobs[sent] = express
                            pending.add(sent)
                if self.superseded(action):
                    continue
                write = self.write_of(action)
                probing = (
                    write.by_id
                    and not context.updates_confirmed
                    and context.updates_off_reason is None  # drift needs no request at all
                )
                if probing:
                    # The first update goes out alone: if the server lacks the method, exactly
                    # one request learns it, not a pool-full of them.
                    for done_fut in _as_done(pending):
                        self._finish(jobs.pop(done_fut), done_fut)
                    pending = set()
                submitted = self._submit(pool, write)
                if submitted is None:
                    continue
                if probing:
                    wait([submitted])
                    self._finish(write, submitted)
                    continue
                jobs[submitted] = write
                pending.add(submitted)
            # Whatever is in flight finishes and is committed, even when stopping.
            for fut in _as_done(pending):
                self._finish(jobs.pop(fut), fut)

    def _submit(self, pool: ThreadPoolExecutor, write: Write[Any]) -> Future[Any] | None:
        """The write's journal is committed (by ``send``) before its request is handed to a
        worker; a write that needs no request is done at once."""
        request = write.send()
        if request is None:
            self._on_done()
            return None
        return pool.submit(request)

    def _finish(self, write: Write[Any], fut: Future[Any]) -> None:
        """The request came back (or failed): the write commits its outcome."""
        try:
            answer = fut.result()
        except errors.SkuferryError as exc:
            write.failed(exc)
        else:
            write.applied(answer)
        self._on_done()


def _as_done(pending: set[Future[Any]]) -> Iterable[Future[Any]]:
    while pending:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        yield from done
