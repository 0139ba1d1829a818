"""Sending creates and updates through a small bounded pool, journalled in the mirror.

Only the calling thread touches the mirror: it commits the intent, hands the
HTTP call to a worker, and commits the outcome when the future completes. The
workers only talk HTTP (their pace is set by the shared budget inside the
client, not by the pool): ``max_in_flight`` requests overlap their latency.

What an update carries is ``updates.py``'s business (only changed owned fields,
PUT merged over the product as read); an ARCHIVE sends the ``[gone]`` patch.

Outcomes, per product:
- created / updated / archived / restored: committed with the remote id, digest and what
  was sent;
- Rejected (4xx): marked rejected with the server's message, not resent until the data change;
- OutcomeUnknown on a create: the intent stays open; the engine resolves it by lookup, never
  by re-POST;
- OutcomeUnknown on an update, restore or archive: its journal (``record_update_sent``,
  ``record_archive_sent``) stays and the action goes to ``unsettled``: the engine reads the
  product back in the same run (``settle.py``) and commits it, or sends it again;
- updates off (``update_method = "none"``, or a 405 learnt in this run): an update is DRIFT,
  a restore stays ARCHIVED, an archive is DRIFT unless an earlier [gone] PATCH is in doubt
  (or this one got the 405): then it goes to ``unsettled``, and the read settles it;
- RateLimited / QuotaExceeded: not applied, marked failed, retried next run;
- Interrupted: never sent; nothing is marked (the next run plans it again), not counted failed;
- AuthError (401/403): the run ends, and no product is marked (the key is at fault, not
  the product);
- Unreachable, BadResponse, a 404 on the collection: the run ends (``fatal``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, Literal, TypeGuard

from skuferry import errors, logs
from skuferry.lifecycle import archive_in_doubt
from skuferry.models import Action, Kind, Product, RunSummary, State
from skuferry.state.mirror import Mirror
from skuferry.sync.write.doubt import Doubts
from skuferry.sync.write.fields import Ownership, after_update
from skuferry.sync.write.gone import GonePolicy
from skuferry.sync.write.gone import sent_after_archive as gone_sent
from skuferry.sync.write.updates import Outcome, Updater

if TYPE_CHECKING:
    from skuferry.remote.client import RemoteApi  # a type; importing httpx costs ~0.1 s

log = logs.get(__name__)

_UPDATES = (Kind.UPDATE, Kind.RESTORE, Kind.ARCHIVE)  # what PATCH/PUT carry


class Writer:
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
        self._client = client
        self._mirror = mirror
        self._run_id = run_id
        self._method = update_method
        self._max = max_in_flight
        self._stop = stop or threading.Event()
        self._on_done = on_done or (lambda: None)
        self._gone = gone or GonePolicy()
        self.ownership = ownership or Ownership()
        self._updater = Updater(
            client,
            method="put" if update_method == "put" else "patch",
            ownership=self.ownership,
            policy=self._gone,
        )
        self.summary = summary or RunSummary()  # the run's: counts and problems go there
        # What the writes leave open, for the engine to settle before the run ends:
        self.unknown: list[Product] = []  # a create's outcome unknown: intent open
        self.missing: list[Product] = []  # remote id 404'd: deleted remotely
        self.unsettled: list[Action] = []  # an update's answer lost (settle.py)
        self.fatal: errors.SkuferryError | None = None  # ends the run once the writes stop
        # When each create went out and came back, or was lost: what the list must show
        # before a create in doubt is settled by its absence (doubt.py).
        self.doubts = doubts if doubts is not None else Doubts(bound_s=0.0)
        self.clock = clock
        self._sent_at: dict[str, float] = {}  # key -> its POST went out (set by the worker)
        self._updates_confirmed = False  # set by the first update the server accepts
        self._updates_off_reason: str | None = (
            'updates are off ([api] update_method = "none")' if update_method == "none" else None
        )

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
        jobs: dict[Future[Any], Action] = {}
        workers = self._max + self.spare
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
                        if (sent := self._submit(pool, urgent)) is not None:
                            jobs[sent] = urgent
                            pending.add(sent)
                if self.superseded(action):
                    continue
                probing = (
                    action.kind in _UPDATES
                    and not self._updates_confirmed
                    and self._updates_off_reason is None  # drift needs no request at all
                )
                if probing:
                    # The first update goes out alone: if the server lacks the method, exactly
                    # one request learns it, not a pool-full of them.
                    for done_fut in _as_done(pending):
                        self._finish(jobs.pop(done_fut), done_fut)
                    pending = set()
                submitted = self._submit(pool, action)
                if submitted is None:
                    continue
                if probing:
                    wait([submitted])
                    self._finish(action, submitted)
                    continue
                jobs[submitted] = action
                pending.add(submitted)
            # Whatever is in flight finishes and is committed, even when stopping.
            for fut in _as_done(pending):
                self._finish(jobs.pop(fut), fut)

    def _submit(self, pool: ThreadPoolExecutor, action: Action) -> Future[Any] | None:
        if action.kind is Kind.ARCHIVE:
            return self._submit_archive(pool, action)
        product = _product(action)
        if action.kind is Kind.CREATE:
            self._mirror.open_intent(product, run_id=self._run_id)  # committed before the POST
            return pool.submit(self._create, product)
        restore = action.kind is Kind.RESTORE
        sent = self._mirror.payload(product.key)
        if self._updater.nothing_to_send(product, sent, restore=restore):
            # Only create-only fields (or nothing the remote sees) changed: no request at all.
            self._mirror.record_updated(product, _remote_id(action), sent=sent)
            if restore:
                self.summary.restored += 1
            else:
                self.summary.unchanged += 1
            self._on_done()
            return None
        if self._updates_off_reason is not None:
            if restore:  # stays ARCHIVED: the next run restores it again
                self._mirror.record_unsent(
                    product.key, self._updates_off_reason, state=State.ARCHIVED
                )
            else:
                self._mirror.record_drift(product, self._updates_off_reason)
            self.summary.drift += 1
            self._on_done()
            return None
        # Journalled before the PATCH/PUT: an answer lost leaves fields the remote may hold.
        in_flight = self._updater.in_flight(product, sent, restore=restore)
        doubt = (self._gone.archiving or "") if restore else None  # may be live: archive in doubt
        self._mirror.record_update_sent(product.key, in_flight, patch_digest=doubt)
        return pool.submit(self._updater.update, _remote_id(action), product, sent, restore=restore)

    def _create(self, product: Product) -> dict[str, Any]:
        """The worker's POST, timed: a create sent after a lost answer is a witness."""
        self._sent_at[product.key] = self.clock()
        return self._client.create_product(product.payload)

    def expected(self, action: Action, sent: dict[str, Any] | None) -> dict[str, Any]:
        """What the remote holds once ``action``'s write went through (``settle.py``)."""
        if action.kind is Kind.ARCHIVE:
            return dict(self._gone.patch)
        return self._updater.expected(_product(action), sent, restore=action.kind is Kind.RESTORE)

    def settled(self, action: Action, sent: dict[str, Any] | None) -> None:
        """A write whose answer was lost is found applied on the remote: commit it."""
        wanted = self.expected(action, sent)
        if action.kind is Kind.ARCHIVE:
            self._mirror.record_archived(_key(action), gone_sent(sent, wanted))
            self.summary.archived += 1
            return
        product = _product(action)
        now_sent = after_update(sent, wanted, product.payload)
        self._mirror.record_updated(product, _remote_id(action), sent=now_sent)
        if action.kind is Kind.RESTORE:
            self.summary.restored += 1
        else:
            self.summary.updated += 1

    def _submit_archive(self, pool: ThreadPoolExecutor, action: Action) -> Future[Any] | None:
        key = _key(action)
        if self._updates_off_reason is not None:
            if self._archive_in_doubt(key):
                # An earlier [gone] PATCH may have landed: a read tells (settle.py), not a guess.
                self.unsettled.append(action)
            else:  # the remote holds it live: planned again next run
                self._mirror.record_unsent(
                    key, f"not archived: {self._updates_off_reason}", state=State.DRIFT
                )
                self.summary.drift += 1
            self._on_done()
            return None
        # Journalled before the PATCH: an answer lost leaves a product that may be archived.
        self._mirror.record_archive_sent(key, patch_digest=self._gone.archiving or "")
        return pool.submit(self._updater.archive, _remote_id(action), self._mirror.payload(key))

    def _archive_in_doubt(self, key: str) -> bool:
        """Whether the mirror holds ``key`` ARCHIVED in doubt: its [gone] PATCH went out and
        the answer never came (``Mirror.record_archive_sent``)."""
        row = self._mirror.rows([key]).get(key)
        return row is not None and archive_in_doubt(row, self._gone.archiving)

    def _finish(self, action: Action, fut: Future[Any]) -> None:
        try:
            data = fut.result()
        except errors.SkuferryError as exc:
            if action.kind is Kind.ARCHIVE:
                self._archive_failed(action, exc)
            else:
                self._failed(action, _product(action), exc)
            self._on_done()
            return
        if action.kind is Kind.CREATE:
            product = _product(action)
            self._mirror.record_created(product, str(data["id"]))
            self.summary.created += 1
            sent = self._sent_at.pop(product.key, None)
            if sent is not None:
                self.doubts.created(str(data["id"]), sent=sent, answered=self.clock())
            log.debug("sync.created", key=product.key, remote_id=data["id"])
        else:
            self._applied(action, data)
        self._on_done()

    def _applied(self, action: Action, outcome: Outcome) -> None:
        """An update, restore or archive went through (or needed no write): commit it."""
        if outcome.wrote:
            self._updates_confirmed = True
        remote_id = _remote_id(action)
        if action.kind is Kind.ARCHIVE:
            self._mirror.record_archived(_key(action), outcome.sent)
            self.summary.archived += 1
            log.info("sync.archived", key=action.key, remote_id=remote_id)
            return
        product = _product(action)
        self._mirror.record_updated(product, remote_id, sent=outcome.sent)
        self.summary.adopted += outcome.adopted
        if action.kind is Kind.RESTORE:
            self.summary.restored += 1
            log.info("sync.restored", key=product.key, remote_id=remote_id)
        elif outcome.wrote:
            self.summary.updated += 1
            log.debug("sync.updated", key=product.key, remote_id=remote_id)
        else:
            self.summary.unchanged += 1  # read and found in step: linked without a write

    def _failed(self, action: Action, product: Product, exc: errors.SkuferryError) -> None:
        creating = action.kind is Kind.CREATE
        restoring = action.kind is Kind.RESTORE
        key = product.key
        self._sent_at.pop(key, None)
        if isinstance(exc, errors.AuthError | errors.Interrupted):
            # Not the product's fault, and nothing was applied: the mirror is left as it is
            # (the next run plans the product again), and it is not counted as failed.
            if creating:
                self._mirror.close_intent(key)
            self._ended(key, exc)
        elif isinstance(exc, errors.OutcomeUnknown) and not creating:
            self.unsettled.append(action)  # read back in this run (settle.py)
            log.warning("sync.update.unknown", key=key, error=str(exc))
        elif isinstance(exc, errors.Rejected):
            if restoring:  # stays ARCHIVED: restored (restore table and all) when data change
                self._mirror.record_restore_refused(product, exc.message or str(exc))
            else:
                self._mirror.record_rejected(product, exc.message or str(exc), status=exc.status)
            self.summary.refused(key, product.line, str(exc))
            log.warning(
                "sync.rejected", key=key, line=product.line, status=exc.status, reason=exc.message
            )
        elif isinstance(exc, errors.OutcomeUnknown | errors.BadResponse) and creating:
            # The POST may have landed: keep the intent open and resolve it by lookup.
            self._mirror.record_failed(key, f"outcome unknown: {exc}", product=product)
            self.unknown.append(product)
            self.doubts.in_doubt(key, lost=self.clock())
            log.warning("sync.create.unknown", key=key, error=str(exc))
            if isinstance(exc, errors.BadResponse):
                self.fatal = exc
        elif self._method_missing(exc, action):
            self._updates_off(exc)
            reason = self._updates_off_reason or str(exc)
            if restoring:
                self._mirror.record_unsent(key, reason, state=State.ARCHIVED)
            else:
                self._mirror.record_drift(product, reason)
            self.summary.drift += 1
        elif isinstance(exc, errors.NotFound) and not creating:
            self._mirror.record_remote_missing(key)
            self.missing.append(product)
            log.warning("sync.update.missing", key=key, remote_id=action.remote_id)
        else:
            if creating:
                self._mirror.close_intent(key)  # provably not applied: nothing to look up
            if restoring:
                self._mirror.record_unsent(key, str(exc), state=State.ARCHIVED)
            else:
                status = (
                    exc.status if isinstance(exc, errors.HttpError | errors.BadResponse) else None
                )
                self._mirror.record_failed(key, str(exc), product=product, status=status)
            self._other_failure(key, exc)

    def _archive_failed(self, action: Action, exc: errors.SkuferryError) -> None:
        """The [gone] patch did not go through; the product stays planned for archiving."""
        key = _key(action)
        if isinstance(exc, errors.AuthError | errors.Interrupted):
            self._ended(key, exc)  # the journal stays: ARCHIVED in doubt, sent again next run
        elif isinstance(exc, errors.OutcomeUnknown):
            self.unsettled.append(action)  # read back in this run (settle.py)
            log.warning("sync.archive.unknown", key=key, error=str(exc))
        elif isinstance(exc, errors.Rejected):
            reason = f"the [gone] patch was refused: {exc.message or exc}"
            digest = self._gone.archiving or ""
            self._mirror.record_archive_refused(key, reason, patch_digest=digest)
            self.summary.refused(key, None, reason)
            log.warning("sync.archive.rejected", key=key, status=exc.status, reason=exc.message)
        elif self._method_missing(exc, action):
            # This PATCH was not applied, but an earlier one (the journal was in doubt before
            # it went out) may have been: a read tells (settle.py), then drift if it did not.
            self._updates_off(exc)
            self.unsettled.append(action)
        elif isinstance(exc, errors.NotFound):
            # Deleted on the remote: nothing left to archive. PENDING without a remote id, so
            # if the key comes back it is looked up first (staff may have made it again).
            self._mirror.record_remote_missing(key)
            log.warning("sync.archive.missing", key=key, remote_id=action.remote_id)
        else:
            if not isinstance(exc, errors.OutcomeUnknown | errors.BadResponse):
                self._mirror.record_failed(key, str(exc))  # provably not applied
            # else the journal stays: ARCHIVED in doubt (see Mirror.record_archive_sent)
            self._other_failure(key, exc)

    def _ended(self, key: str, exc: errors.SkuferryError) -> None:
        """A 401/403 ends the run; a stop leaves the rest unsent. Neither fails the product."""
        if isinstance(exc, errors.AuthError):
            self.fatal = self.fatal or exc
            log.error("sync.write.auth_refused", key=key, status=exc.status)

    def _other_failure(self, key: str, exc: errors.SkuferryError) -> None:
        self.summary.fail(key, str(exc))
        if isinstance(exc, errors.Unreachable | errors.NotFound | errors.TransportError):
            self.fatal = self.fatal or exc
        elif not isinstance(exc, errors.Interrupted):
            log.warning("sync.write.failed", key=key, error=str(exc))

    def _method_missing(
        self, exc: errors.SkuferryError, action: Action
    ) -> TypeGuard[errors.HttpError]:
        """A 405, or a 404 on PATCH/PUT for a product that exists: the server lacks the route."""
        if isinstance(exc, errors.MethodNotAllowed):
            return True
        return (
            isinstance(exc, errors.NotFound)
            and action.kind is not Kind.CREATE
            and self._route_missing(action)
        )

    def _route_missing(self, action: Action) -> bool:
        """A 404 on PATCH/PUT: is the product gone, or does the server lack the route?"""
        try:
            self._client.get_product(_remote_id(action))
        except errors.NotFound:
            return False
        except errors.SkuferryError:
            return False
        return True  # the product exists, so the 404 was for the method route itself

    def _updates_off(self, exc: errors.HttpError) -> None:
        if self._updates_off_reason is not None:
            return
        method = "PUT" if self._method == "put" else "PATCH"
        self._updates_off_reason = (
            f"the API does not accept {method} /api/v1/products/:id (HTTP {exc.status}); "
            "changed products are reported as drift"
        )
        other = "patch" if method == "PUT" else "put"
        note = (
            f"{self._updates_off_reason}. Updates are off for the rest of this run. "
            f'If the API takes {other.upper()}, set [api] update_method = "{other}"; if it '
            'takes neither, set update_method = "none" to stop trying. (skuferry\'s sandbox '
            "answers 405 to both only when started with --strict: restart it without it.)"
        )
        self.summary.write_note(note)
        log.error("sync.updates.unsupported", method=method, status=exc.status)


def _product(action: Action) -> Product:
    if action.product is None:
        raise RuntimeError(f"write action without a product: {action}")
    return action.product


def _key(action: Action) -> str:
    if action.key is None:
        raise RuntimeError(f"write action without a key: {action}")
    return action.key


def _remote_id(action: Action) -> str:
    if action.remote_id is None:
        raise RuntimeError(f"update action without a remote id: {action.key}")
    return action.remote_id


def _as_done(pending: set[Future[Any]]) -> Iterable[Future[Any]]:
    while pending:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        yield from done
