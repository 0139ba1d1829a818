"""Sending creates and updates through a small bounded pool, journalled in the mirror.

Only the calling thread touches the mirror. The workers only talk HTTP (their pace is
set by the shared budget inside the client, not by the pool): ``max_in_flight``
requests overlap their latency.

Group commit. A write's journal is durable before its request leaves, but the writes
that are ready together are journalled together: the writer takes up to ``BATCH``
planned writes at once and commits their journals (intents, update journals) in one
transaction (``Mirror.batch``), then hands their requests to the pool as workers come
free. Answers are recorded in batches too: in one transaction with the next journals,
or once ``FLUSH_S`` has passed since the oldest answer waiting, or ``BATCH`` answers
wait. A crash at any point leaves each write known (its outcome committed) or in doubt
(its journal committed, its outcome not): a create in doubt is looked up, never sent
blind; a journal whose request never left is no different (the lookup finds nothing and
it is created). A stop leaves the journalled writes whose requests never left as never
sent (``Write.not_sent``).

What each kind of write sends and records (success, refusal, an unknown outcome)
is the write's own business (``actions.Write``); the writer runs them, sends the
first PATCH/PUT alone (so a server lacking the method costs one request, and no
update is journalled behind it before the method is known), and keeps what they leave
open for the run to settle before it ends.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import (
    FIRST_COMPLETED,
    Future,
    InvalidStateError,
    ThreadPoolExecutor,
    wait,
)
from contextlib import suppress
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

BATCH = 64  # planned writes journalled in one transaction, and answers recorded in one
FLUSH_S = 0.05  # an answer is committed at most about this long after it came back
# How often a writer with spare workers looks for urgent writes nobody rang for (keys
# another process hands over through the state file), and for a stop.
EXPRESS_POLL_S = 1.0


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
        # Writes journalled whose requests wait for a worker, in order.
        self._ready: deque[tuple[Write[Any], Callable[[], Any]]] = deque()
        self._express: list[tuple[Write[Any], Callable[[], Any]]] = []  # urgent: at once
        self._stop = stop or threading.Event()
        # Rung when urgent writes arrive (``ring``): the loop waiting on its requests wakes
        # at once, so it need not look for them on a clock.
        self._bell: Future[None] = Future()
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

    def _ending(self) -> bool:
        """``stopped``, asked again (a stop or a fatal answer may come at any moment)."""
        return self.stopped

    # Urgent writes that may not wait for room in the pool (a subclass's): they go to
    # ``spare`` extra workers while the pool's own wait for the budget.
    spare = 0

    @property
    def express_poll_s(self) -> float:
        """How often the writer looks for urgent writes (``express``) nobody rang for, and
        for a stop, while its pool waits for the budget (with ``spare`` workers; else it
        waits for an answer, and the workers' own waits notice the stop)."""
        return EXPRESS_POLL_S

    def ring(self) -> None:
        """Urgent writes arrived (any thread): the loop looks for them now, not at its next
        poll. Rung after they were queued; the loop takes a new bell before it looks."""
        bell = self._bell
        if not bell.done():
            with suppress(InvalidStateError):  # rung twice at once: once is enough
                bell.set_result(None)

    def express(self) -> list[Action]:
        return []

    def superseded(self, action: Action) -> bool:
        """Whether ``action``, handed out by the plan, was replaced meanwhile."""
        return False

    def tail(self) -> list[Action]:
        """Writes that arrived once the plan was handed out (a subclass's lane)."""
        return []

    def _ended(self) -> None:
        """The writes are over (a subclass lets its lane know)."""

    def run(self, actions: Iterable[Action]) -> None:
        source = iter(actions)
        exhausted = False
        workers = self._max + self.spare
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="skuferry-write") as pool:
            flight = _Flight(self, pool)
            try:
                while not self.stopped:
                    flight.fill()
                    if not exhausted and len(self._ready) < self._max and not self._ending():
                        batch, probe, exhausted = self._pull(source, BATCH - len(self._ready))
                        self._journal(batch, flight.take_answers())
                        if probe is not None:  # the first PATCH/PUT: alone, on an empty pool
                            self._record(flight.drain(), journal=[])
                            self._probe(pool, probe)
                        continue
                    more = [] if self._ending() else self.tail()
                    if more:  # the plan is out; writes that arrived since (the urgent lane)
                        self._journal([self.write_of(a) for a in more], flight.take_answers())
                        continue
                    if self._ending():
                        break
                    if flight.idle():
                        if not flight.answered:
                            break
                        # recorded now: a lane waiting for one of them plans it next
                        self._record(flight.take_answers(), journal=[])
                        continue
                    flight.wait()
                    for urgent in [] if self._ending() else self.express():
                        flight.express(self.write_of(urgent))
                # Whatever is in flight finishes and is committed, even when stopping.
                if self._stop.is_set():
                    self._wake_waiting()  # sends waiting for the budget find the stop now
                self._record(flight.take_answers() + flight.drain(), journal=[])
                unsent = [*self._express, *self._ready]
                if unsent:  # journalled, never sent (a stop): as if never planned
                    self._unsend(unsent)
            finally:
                # On an error or a crash the journals stay as they are: in doubt, looked up.
                self._ready.clear()
                self._express.clear()
                self._ended()

    def _pull(
        self, source: Iterator[Action], room: int
    ) -> tuple[list[Write[Any]], Write[Any] | None, bool]:
        """Up to ``room`` planned writes to journal together; the first PATCH/PUT of the run
        (while the server's method is not yet known) ends the batch, to go out alone.
        Returns (the batch, that probe or None, whether the plan is exhausted)."""
        batch: list[Write[Any]] = []
        context = self.context
        while len(batch) < room and not self.stopped:
            action = next(source, None)
            if action is None:
                return self._newest(batch), None, True
            if self.superseded(action):
                continue
            write = self.write_of(action)
            if (
                write.by_id
                and not context.updates_confirmed
                and context.updates_off_reason is None  # drift needs no request at all
            ):
                return self._newest(batch), write, False
            batch.append(write)
        return self._newest(batch), None, False

    def _newest(self, batch: list[Write[Any]]) -> list[Write[Any]]:
        """The batch less the writes the urgent lane superseded while it was taken."""
        return [w for w in batch if not self.superseded(w.action)]

    def _journal(
        self, batch: list[Write[Any]], answered: list[tuple[Write[Any], Future[Any]]]
    ) -> None:
        """The answers waiting and the batch's journals, in one transaction; then the
        batch's requests are ready for the pool (a write that needs none is done)."""
        self._record(answered, journal=batch)

    def _record(
        self,
        answered: list[tuple[Write[Any], Future[Any]]],
        *,
        journal: list[Write[Any]],
    ) -> None:
        """Commit the outcomes of ``answered`` and the journals of ``journal`` together.

        Answers are recorded in the transaction; a failed request is recorded after it, on
        its own (a 404 on PATCH/PUT reads the product to tell a deleted product from a
        missing route: no request is made inside a transaction)."""
        if not answered and not journal:
            return
        failed: list[tuple[Write[Any], errors.SkuferryError]] = []
        requests: list[tuple[Write[Any], Callable[[], Any] | None]] = []
        with self.context.mirror.batch():
            for write, fut in answered:
                exc = fut.exception()
                if exc is None:
                    write.applied(fut.result())
                elif isinstance(exc, errors.SkuferryError):
                    failed.append((write, exc))
                else:
                    raise exc  # a programming error or a crash: the run ends here
            for write in journal:
                requests.append((write, write.send()))
        for write, exc in failed:
            write.failed(exc)
        for write, _fut in answered:
            self._done(write)
        for write, request in requests:
            if request is None:
                self._on_done()
                continue
            self._journalled(write)
            if not self._urgent(write):
                self._ready.append((write, request))
            elif write.by_id:  # the urgent lane's update: a spare worker, at once
                self._express.append((write, request))
            else:  # the urgent lane's create: first in line
                self._ready.appendleft((write, request))

    def _send_alone(self, write: Write[Any]) -> Callable[[], Any] | None:
        """One write journalled in a transaction of its own (the urgent lane's, a probe)."""
        with self.context.mirror.batch():
            request = write.send()
        if request is None:
            self._on_done()
            return None
        self._journalled(write)
        return request

    def _probe(self, pool: ThreadPoolExecutor, write: Write[Any]) -> None:
        """The first update goes out alone: if the server lacks the method, exactly one
        request learns it, not a pool-full of them."""
        request = self._send_alone(write)
        if request is None:
            return
        sent = self._dispatch(pool, write, request)
        wait([sent])
        self._record([(write, sent)], journal=[])

    def _unsend(self, writes: list[tuple[Write[Any], Callable[[], Any]]]) -> None:
        """Journalled writes whose requests never left: not sent (a create's intent closed)."""
        with self.context.mirror.batch():
            for write, _request in writes:
                write.not_sent()
        for write, _request in writes:
            self._released(write)

    def _dispatch(
        self, pool: ThreadPoolExecutor, write: Write[Any], request: Callable[[], Any]
    ) -> Future[Any]:
        """Hand a journalled write's request to a worker."""
        return pool.submit(request)

    def _journalled(self, write: Write[Any]) -> None:
        """A write's journal is committed: its request may go (a subclass tracks it)."""

    def _wake_waiting(self) -> None:
        """The run stops: requests waiting for the budget look again now and give up (a
        subclass whose requests wait on their marks wakes them; these wait on the stop)."""

    def _urgent(self, write: Write[Any]) -> bool:
        """Whether a journalled write is urgent: it does not wait behind the others."""
        return False

    def _released(self, write: Write[Any]) -> None:
        """A write's outcome is committed, or it was never sent (a subclass tracks it)."""

    def _done(self, write: Write[Any]) -> None:
        self._released(write)
        self._on_done()


class _Flight:
    """The requests handed to the pool, and the answers not yet recorded."""

    def __init__(self, writer: Writer, pool: ThreadPoolExecutor) -> None:
        self.writer, self.pool = writer, pool
        self.pending: set[Future[Any]] = set()
        self.jobs: dict[Future[Any], Write[Any]] = {}
        self.answered: list[tuple[Write[Any], Future[Any]]] = []  # outcomes not committed
        self.since = 0.0  # when the oldest of them came back

    def send(self, write: Write[Any], request: Callable[[], Any]) -> None:
        sent = self.writer._dispatch(self.pool, write, request)
        self.jobs[sent] = write
        self.pending.add(sent)

    def fill(self) -> None:
        """Journalled writes to the pool while it has room for them."""
        writer, ready = self.writer, self.writer._ready
        while writer._express and not writer.stopped:
            self.send(*writer._express.pop(0))
        while ready and len(self.pending) < writer._max and not writer.stopped:
            self.send(*ready.popleft())

    def express(self, write: Write[Any]) -> None:
        """An urgent write, journalled alone and sent on a spare worker at once."""
        request = self.writer._send_alone(write)
        if request is not None:
            self.send(write, request)

    def idle(self) -> bool:
        return not self.pending and not self.writer._ready and not self.writer._express

    def take_answers(self) -> list[tuple[Write[Any], Future[Any]]]:
        answered, self.answered = self.answered, []
        return answered

    def drain(self) -> list[tuple[Write[Any], Future[Any]]]:
        """Wait for every request in the pool; their answers (to record)."""
        out = [(self.jobs.pop(f), f) for f in _as_done(self.pending)]
        self.pending = set()
        return out

    def wait(self) -> None:
        """Wait for the next answer (or the urgent lane's next look); answers are recorded
        once ``BATCH`` of them wait or the oldest has waited ``FLUSH_S``."""
        writer = self.writer
        if self.answered and (
            len(self.answered) >= BATCH or time.monotonic() - self.since >= FLUSH_S
        ):
            writer._record(self.take_answers(), journal=[])
        poll = writer.express_poll_s if writer.spare else None
        if self.answered:
            poll = max(0.0, min(poll or FLUSH_S, self.since + FLUSH_S - time.monotonic()))
        bell = writer._bell
        done, _ = wait({*self.pending, bell}, timeout=poll, return_when=FIRST_COMPLETED)
        if bell in done:  # a new bell before anyone looks: a ring from now on is heard
            writer._bell = Future()
            done.discard(bell)
        self.pending -= done
        for fut in done:
            exc = fut.exception()
            if exc is not None and not isinstance(exc, errors.SkuferryError):
                raise exc  # a crash or a programming error: nothing more is sent
        if done and not self.answered:
            self.since = time.monotonic()
        self.answered += [(self.jobs.pop(f), f) for f in done]


def _as_done(pending: set[Future[Any]]) -> Iterable[Future[Any]]:
    while pending:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        yield from done
