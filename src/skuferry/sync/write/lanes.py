"""Priority lanes: which write goes next when writes wait for budget.

At 180 writes a minute a re-sync of 10,000 descriptions takes most of an hour;
a stock change must not wait behind it. Two things order the writes:

- ``ordered``: with ``[mapping] urgent = ["price", "stock"]``, the run's own
  writes go out as updates that change an urgent field first, then creates,
  then the rest (updates of other fields, restores and archives). Without it
  they go in source order, as they always did.
- ``Lanes``: keys that arrive while the run is writing (a daemon hook, a
  ``sync --only`` from another shell) are read from the source again, planned
  against the mirror and sent before anything else the run still has to send,
  by the same writer and budget: no second writer, no wait for the run's end.
  A key already written this run is planned again from the mirror (only what
  changed since goes out); a key still in flight waits for its answer first,
  so two writes of one product never overlap; the run's own, older action for
  a key the lane has handled is dropped.

Keys the lane cannot take (a create that needs a remote lookup in a run
without a remote index, keys still in flight at the end) are handed back
(``leftover``) for a targeted run right after this one.

A lane's write never waits behind the backlog, in two ways. Its sends are urgent
for the budget: they use the room the backlog leaves in
each window. And while every worker of the pool waits for budget with a write of
the backlog, the writer still looks for lane keys (``express``) and sends their
updates on spare workers, instead of waiting for a worker to come free.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from skuferry import errors, logs
from skuferry.models import Action, Kind
from skuferry.remote import priority
from skuferry.state.mirror import Mirror
from skuferry.state.planstore import PlanStore
from skuferry.sync.write.actions import Write
from skuferry.sync.write.writer import EXPRESS_POLL_S, Writer

log = logs.get(__name__)

# How often the lane looks at the state file for keys from other processes: as often as
# the writer looks for urgent writes nobody rang for (keys put in the inbox ring it).
POLL_S = EXPRESS_POLL_S
_UPDATES = (Kind.UPDATE, Kind.RESTORE)
_REST = (Kind.UPDATE, Kind.RESTORE, Kind.ARCHIVE)


class UrgentInbox:
    """Keys waiting for a write, coalesced; shared by the daemon's hooks and its runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: dict[str, None] = {}  # insertion-ordered set
        self._changed = False  # a watched file changed: the run going reads it again
        self.arrived = threading.Event()
        self._bells: list[Callable[[], None]] = []  # the writers going: woken by arrivals

    @contextmanager
    def ringing(self, bell: Callable[[], None]) -> Iterator[None]:
        """While inside, ``bell`` is rung (after the keys are queued) whenever keys arrive
        or the source changes: a run's writer, which then looks at once, not on a clock."""
        with self._lock:
            self._bells.append(bell)
        try:
            yield
        finally:
            with self._lock:
                self._bells.remove(bell)

    def _ring(self) -> None:
        with self._lock:
            bells = list(self._bells)
        for bell in bells:
            bell()

    def source_changed(self) -> None:
        """A watched file settled in a new version: the run going reads it again
        before its next write."""
        with self._lock:
            self._changed = True
            self.arrived.set()
        self._ring()

    def take_changed(self) -> bool:
        """Whether the source changed since last asked (and forget it)."""
        with self._lock:
            changed, self._changed = self._changed, False
            return changed

    def put(self, keys: Iterable[str]) -> int:
        """Queue keys (each once, however often it is pushed); how many are waiting."""
        with self._lock:
            for key in keys:
                self._keys[key] = None
            self.arrived.set()
            waiting = len(self._keys)
        self._ring()
        return waiting

    def take(self) -> list[str]:
        with self._lock:
            keys = list(self._keys)
            self._keys.clear()
            self.arrived.clear()
            return keys

    def __len__(self) -> int:
        with self._lock:
            return len(self._keys)


def changes_urgent(action: Action, sent: dict[str, Any] | None, urgent: Sequence[str]) -> bool:
    """Whether an update changes one of the ``urgent`` fields from what was last sent."""
    if action.product is None or not urgent:
        return False
    payload = action.product.payload
    missing = object()
    before = sent or {}
    return any(
        field in payload and payload[field] != before.get(field, missing) for field in urgent
    )


def ordered(store: PlanStore, mirror: Mirror, urgent: Sequence[str]) -> Iterator[Action]:
    """The plan's writes: urgent updates, creates, the rest; source order without ``urgent``."""
    writes = (Kind.CREATE, *_REST)
    if not urgent:
        yield from store.actions(*writes)
        return
    first: set[str] = set()
    for action in store.actions(*_UPDATES):
        if action.key is not None and changes_urgent(action, mirror.payload(action.key), urgent):
            first.add(action.key)
            yield action
    yield from store.actions(Kind.CREATE)
    for action in store.actions(*_REST):
        if action.key not in first:
            yield action


class TrackingWriter(Writer):
    """The run's writer, knowing which keys are in flight (so a lane never overlaps them)."""

    spare = 4  # workers for the lane's updates while the pool waits for budget

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._flying: Counter[str] = Counter()
        self._flying_lock = threading.Lock()
        self._marks: dict[str, priority.Mark] = {}  # the writes in flight, by key
        self._write_marks: dict[int, priority.Mark] = {}  # each journalled write's mark
        self.lanes: Lanes | None = None  # the run's lanes: which writes are urgent

    def express(self) -> list[Action]:
        """The lane's updates that arrived while the pool is full (after the first update
        confirmed the method: that one goes out alone)."""
        if self.lanes is None or not self.updates_confirmed:
            return []
        return self.lanes.express()

    def tail(self) -> list[Action]:
        return self.lanes.drain() if self.lanes is not None else []

    def _ended(self) -> None:
        if self.lanes is not None:
            self.lanes.close()

    def superseded(self, action: Action) -> bool:
        """The run's own write, handed out before the lane took its key: older, dropped."""
        lanes = self.lanes
        return lanes is not None and not lanes.is_lane(action) and lanes.superseded(action.key)

    def in_flight(self, key: str) -> bool:
        """Whether a write of ``key`` is journalled and not yet answered (or in the pool)."""
        with self._flying_lock:
            return self._flying[key] > 0

    def hasten(self, key: str) -> None:
        """The lane waits for ``key``'s write: one that is on its way turns urgent; one that
        is only journalled, its request not yet handed to a worker, is older than what the
        lane will read, and is dropped (never sent), so the lane plans the key at once."""
        with self._flying_lock:
            mark = self._marks.get(key)
        if mark is not None:
            mark.raise_()
        held = [(w, r) for w, r in self._ready if w.action.key == key]
        if held:
            for item in held:
                self._ready.remove(item)
            self._unsend(held)

    def _wake_waiting(self) -> None:
        for mark in list(self._write_marks.values()):
            mark.wake()

    def _journalled(self, write: Write[Any]) -> None:
        action = write.action
        mark = priority.Mark(self.lanes is not None and self.lanes.is_urgent(action))
        self._write_marks[id(write)] = mark
        if action.key is not None:
            with self._flying_lock:
                self._flying[action.key] += 1
                self._marks[action.key] = mark

    def _urgent(self, write: Write[Any]) -> bool:
        mark = self._write_marks.get(id(write))
        return mark is not None and mark.urgent

    def _dispatch(
        self, pool: ThreadPoolExecutor, write: Write[Any], request: Callable[[], Any]
    ) -> Future[Any]:
        mark = self._write_marks.get(id(write)) or priority.Mark()
        return pool.submit(priority.with_mark(request, mark))

    def _released(self, write: Write[Any]) -> None:
        self._write_marks.pop(id(write), None)
        key = write.action.key
        if key is not None:
            with self._flying_lock:
                self._flying[key] -= 1
                if self._flying[key] <= 0:
                    del self._flying[key]
                    self._marks.pop(key, None)


class Lanes:
    """The writer's input: keys that arrive mid-run first, then the run's own writes.

    ``take`` returns the keys that arrived since it was last called (cheap; called
    before every write); ``fetch`` reads and plans them (their write actions);
    ``can_send`` says whether an action may go out in this run (a create that needs a
    lookup may not when the run has no remote index).
    """

    def __init__(
        self,
        writes: Iterable[Action],
        *,
        take: Callable[[], list[str]],
        fetch: Callable[[list[str]], list[Action]],
        in_flight: Callable[[str], bool],
        can_send: Callable[[Action], bool] = lambda _a: True,
        express: bool = True,
        hasten: Callable[[str], None] = lambda _k: None,
    ) -> None:
        self._writes = writes
        self._take = take
        self._fetch = fetch
        self._in_flight = in_flight
        self._can_send = can_send
        self._express = express  # False (--verify): every write goes through the checks
        self._hasten = hasten  # a write in flight the lane waits for: urgent now
        self._handled: set[str] = set()  # keys the lane took: the run's own actions are older
        self._waiting: dict[str, None] = {}  # taken, but in flight: planned once answered
        self._ready: list[Action] = []  # read and planned, not handed out yet
        self._urgent_ids: set[int] = set()  # the lane's actions (by identity): urgent sends
        self.leftover: list[str] = []  # for a targeted run after this one
        self.sent = 0  # lane actions handed to the writer

    def __iter__(self) -> Iterator[Action]:
        for action in self._writes:
            yield from self._urgent()
            if action.key is not None and action.key in self._handled:
                continue  # superseded by what the lane read
            yield action
        yield from self._urgent()

    def drain(self) -> list[Action]:
        """Once the run's own writes are all handed out: the lane's writes ready now, of
        every kind (keys whose writes were in flight at the end come here once answered)."""
        self._collect()
        ready, self._ready = self._ready, []
        return ready

    def close(self) -> None:
        """The writer is done: keys still waiting are for a run after this one."""
        self.leftover.extend(self._waiting)
        self._waiting.clear()

    def is_urgent(self, action: Action) -> bool:
        """Whether ``action`` is the lane's (its sends use the room kept for the urgent).
        Asked once, as it is sent: the mark is dropped, so a later action that happens to
        get the same identity is not taken for urgent."""
        if id(action) in self._urgent_ids:
            self._urgent_ids.discard(id(action))
            return True
        return False

    def express(self) -> list[Action]:
        """Lane updates ready now, for the writer to send before it has room for more:
        updates and restores only (a create goes through the lookup in order)."""
        if not self._express:
            return []
        self._collect()
        now = [a for a in self._ready if a.kind in _UPDATES]
        if now:
            self._ready = [a for a in self._ready if a.kind not in _UPDATES]
        return now

    def superseded(self, key: str | None) -> bool:
        """Whether a write of the run's own that was handed out (the writer may still hold
        it, not yet journalled) is of a key the lane took since: the lane's is newer. The
        run's own writes handed out after a take are skipped here already."""
        return key is not None and key in self._handled

    def is_lane(self, action: Action) -> bool:
        """Whether ``action`` is the lane's, not yet sent (``is_urgent`` not yet asked)."""
        return id(action) in self._urgent_ids

    def _urgent(self) -> Iterator[Action]:
        self._collect()
        ready, self._ready = self._ready, []
        yield from ready

    def _collect(self) -> None:
        """Take the keys that arrived; read and plan those not in flight into ``_ready``."""
        arrived = self._take()
        for key in arrived:
            self._waiting[key] = None
            self._handled.add(key)
        if not self._waiting:
            return
        for key in arrived:
            if key in self._waiting and self._in_flight(key):
                # its answer first, then the lane's write: both soon (a write only
                # journalled, not yet on its way, is dropped: the lane's is newer)
                self._hasten(key)
        ready = [k for k in self._waiting if not self._in_flight(k)]
        if not ready:
            return
        for key in ready:
            del self._waiting[key]
        log.info("sync.lane.urgent", keys=len(ready))
        try:
            fetched = self._fetch(ready)
        except errors.SourceError as exc:  # the source was cut or replaced meanwhile
            log.warning("sync.lane.unreadable", keys=len(ready), reason=str(exc))
            self.leftover.extend(ready)  # a targeted run after this one reads them
            return
        for action in fetched:
            if self._can_send(action):
                self.sent += 1
                self._urgent_ids.add(id(action))
                self._ready.append(action)
            elif action.key is not None:
                self.leftover.append(action.key)


class Arrivals:
    """``Lanes.take`` for a run: keys from the daemon's inbox and from other processes.

    Other processes (``sync --only`` while this run holds the lock) leave ``lane.<key>``
    rows in the state file's meta table; they are read at most every ``POLL_S`` and
    removed once taken. Keys put in the inbox ring the writer (``UrgentInbox.ringing``)
    and are taken at once.
    """

    def __init__(
        self,
        mirror: Mirror,
        inbox: UrgentInbox | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        reread: Callable[[], list[str]] | None = None,
    ) -> None:
        self._mirror = mirror
        self._inbox = inbox
        self._clock = clock
        self._polled = float("-inf")
        self._reread = reread  # a changed source's urgent keys

    def __call__(self) -> list[str]:
        keys = self._inbox.take() if self._inbox is not None and len(self._inbox) else []
        if self._inbox is not None and self._inbox.take_changed() and self._reread is not None:
            keys.extend(self._reread())
        now = self._clock()
        if now - self._polled >= POLL_S:
            self._polled = now
            keys.extend(self._mirror.take_handed_keys())
        return list(dict.fromkeys(keys))
