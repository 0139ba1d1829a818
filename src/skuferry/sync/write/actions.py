"""Each kind of write carries itself out: how it goes out, and how its outcome is recorded.

As vdirsyncer's actions each apply themselves, a ``Write`` is one product's write with
its whole life; the writer only runs writes in its pool and counts what they leave open.

1. ``send``, on the writer's thread: the journal is written to the mirror (with the
   others of its batch, in one transaction), then the request is handed back for a
   worker once that transaction committed. The request does not leave before its
   journal is durable, so a crash or a lost answer always finds the journal. A write that needs
   no request (nothing owned changed, updates are off) records its outcome at once.
2. The request runs on a worker: HTTP only, the mirror untouched.
3. ``applied`` (the answer came) or ``failed`` (an error), back on the writer's thread,
   commit the outcome. An unknown outcome is never guessed: a create's intent stays open
   for a lookup (``unknown``), never a blind re-POST; a PATCH/PUT's journal stays for a
   read of the product (``unsettled``).
4. A PATCH/PUT whose answer was lost is read back before the run ends (settling): the
   write says what the remote holds once it landed (``expected``) and records what the
   read found (``found_applied``, ``found_unapplied``), or that nothing settled it in
   this run (``given_up``).

The kinds (``Write.of`` picks one for a planned action):

- ``Create``: the POST. Adoptions are decided before it, by the lookup in the remote
  index, which hands over a create only when the product's absence is proven.
- ``Update``: PATCH (only the owned fields changed since last sent) or PUT (merged over
  the product as read). With nothing known of what was last sent it reads the product
  first and writes only if it differs: an adoption by comparison. ``--verify`` repairs
  are updates too.
- ``Restore``: an update that also carries the ``[gone] restore`` table; the product
  stays ARCHIVED until it is known to be live again.
- ``Archive``: the ``[gone]`` patch.

What a failure means, whatever the kind (``Write.failed``):

- Rejected (4xx): marked rejected with the server's message, not resent until the data
  change (a restore stays ARCHIVED, an archive is rejected under the patch's digest);
- an unknown outcome: a create keeps its intent open and is looked up (a BadResponse
  also ends the run); a PATCH/PUT keeps its journal and is read back in this run;
- the update method missing (a 405, or a 404 on PATCH/PUT for a product that exists):
  updates are off for the rest of the run, the product is DRIFT (a restore stays
  ARCHIVED; an archive, whose earlier patch may have landed, is read back);
- a 404 on the product's own id: deleted remotely, its id forgotten (an update's product
  goes to the second look);
- RateLimited / QuotaExceeded / other errors: not applied, marked failed, retried next
  run; Unreachable, a transport error or a 404 on the collection end the run (``fatal``);
- AuthError (401/403) ends the run and marks no product; Interrupted (a stop) was never
  sent: nothing is marked, the next run plans it again; neither counts as failed.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeGuard, TypeVar

from skuferry import errors, logs
from skuferry.lifecycle import archive_in_doubt
from skuferry.models import Action, Kind, Product, RunSummary, State
from skuferry.state import history
from skuferry.state.mirror import Mirror
from skuferry.sync.write.doubt import Doubts
from skuferry.sync.write.fields import after_update
from skuferry.sync.write.gone import GonePolicy
from skuferry.sync.write.gone import sent_after_archive as gone_sent
from skuferry.sync.write.updates import Outcome, Updater

if TYPE_CHECKING:
    from skuferry.remote.client import RemoteApi  # a type; importing httpx costs ~0.1 s

# The events of the writes keep the logger name they had when the writer sent them itself.
log = logs.get("skuferry.sync.writer")

UPDATES_OFF = 'updates are off ([api] update_method = "none")'

Answer = TypeVar("Answer")  # what a write's request returns, for its ``applied``


@dataclass(eq=False)
class WriteContext:
    """What every write of one run shares: where outcomes go, and what is left open."""

    client: RemoteApi
    mirror: Mirror
    summary: RunSummary  # the run's: counts and problems go there
    updater: Updater
    gone: GonePolicy
    doubts: Doubts  # when each create went out and came back, or was lost
    clock: Callable[[], float]
    run_id: int | None
    method: Literal["patch", "put", "none"]
    updates_confirmed: bool = False  # set by the first PATCH/PUT the server accepts
    updates_off_reason: str | None = None  # set when updates are off, for the rest of the run
    # What the writes leave open, for the run to settle before it ends:
    unknown: list[Product] = field(default_factory=list)  # a create's outcome unknown
    missing: list[Product] = field(default_factory=list)  # remote id 404'd: deleted remotely
    unsettled: list[Action] = field(default_factory=list)  # a PATCH/PUT's answer lost
    fatal: errors.SkuferryError | None = None  # ends the run once the writes stop

    def __post_init__(self) -> None:
        if self.method == "none" and self.updates_off_reason is None:
            self.updates_off_reason = UPDATES_OFF

    def ended(self, key: str, exc: errors.SkuferryError) -> None:
        """A 401/403 ends the run; a stop leaves the rest unsent. Neither fails the product."""
        if isinstance(exc, errors.AuthError):
            self.fatal = self.fatal or exc
            log.error("sync.write.auth_refused", key=key, status=exc.status)

    def failed_otherwise(self, key: str, exc: errors.SkuferryError) -> None:
        """Counted failed; an API that cannot be reached (or has no collection) ends the run."""
        self.summary.fail(key, str(exc))
        if isinstance(exc, errors.Unreachable | errors.NotFound | errors.TransportError):
            self.fatal = self.fatal or exc
        elif not isinstance(exc, errors.Interrupted):
            log.warning("sync.write.failed", key=key, error=str(exc))

    def method_missing(
        self, exc: errors.SkuferryError, remote_id: str | None
    ) -> TypeGuard[errors.HttpError]:
        """A 405, or a 404 on PATCH/PUT (``remote_id``) for a product that exists: the
        server lacks the route."""
        if isinstance(exc, errors.MethodNotAllowed):
            return True
        return (
            isinstance(exc, errors.NotFound)
            and remote_id is not None
            and self._route_missing(remote_id)
        )

    def _route_missing(self, remote_id: str) -> bool:
        """A 404 on PATCH/PUT: is the product gone, or does the server lack the route?"""
        try:
            self.client.get_product(remote_id)
        except errors.SkuferryError:
            return False
        return True  # the product exists, so the 404 was for the method route itself

    def updates_off(self, exc: errors.HttpError) -> None:
        """The server lacks the update method: updates are off for the rest of the run."""
        if self.updates_off_reason is not None:
            return
        method = "PUT" if self.method == "put" else "PATCH"
        self.updates_off_reason = (
            f"the API does not accept {method} /api/v1/products/:id (HTTP {exc.status}); "
            "changed products are reported as drift"
        )
        other = "patch" if method == "PUT" else "put"
        note = (
            f"{self.updates_off_reason}. Updates are off for the rest of this run. "
            f'If the API takes {other.upper()}, set [api] update_method = "{other}"; if it '
            'takes neither, set update_method = "none" to stop trying. (skuferry\'s sandbox '
            "answers 405 to both only when started with --strict: restart it without it.)"
        )
        self.summary.write_note(note)
        log.error("sync.updates.unsupported", method=method, status=exc.status)


class Write(ABC, Generic[Answer]):
    """One planned write of one product, carrying itself out against the run's context."""

    by_id: ClassVar[bool] = True  # a PATCH/PUT of the product's id (a create POSTs)
    key: str

    def __init__(self, action: Action, context: WriteContext) -> None:
        self.action = action
        self.context = context

    @staticmethod
    def of(action: Action, context: WriteContext) -> Write[Any]:
        """The write that carries out ``action`` (a create, update, restore or archive)."""
        kind = _KINDS.get(action.kind)
        if kind is None:
            raise RuntimeError(f"not a write: {action.kind.value} {action.key}")
        return kind(action, context)

    @property
    def remote_id(self) -> str:
        if self.action.remote_id is None:
            raise RuntimeError(f"{self.action.kind.value} action without a remote id: {self.key}")
        return self.action.remote_id

    # -- the writer's calls ------------------------------------------------------------
    @abstractmethod
    def send(self) -> Callable[[], Answer] | None:
        """Commit the journal and hand back the request (None: settled without one)."""

    @abstractmethod
    def applied(self, answer: Answer) -> None:
        """The request was answered: commit what the remote now holds."""

    def failed(self, exc: errors.SkuferryError) -> None:
        """The request failed: record what is known of its outcome (see the module's list)."""
        context = self.context
        if isinstance(exc, errors.AuthError | errors.Interrupted):
            # Not the product's fault, and nothing was applied: the mirror keeps what it has
            # (the next run plans the product again), and it is not counted as failed.
            self.not_sent()
            context.ended(self.key, exc)
        elif isinstance(exc, errors.Rejected):
            self.refused(exc)
        elif self.outcome_unknown(exc):
            self.in_doubt(exc)
        elif context.method_missing(exc, self.remote_id if self.by_id else None):
            context.updates_off(exc)
            self.updates_refused(context.updates_off_reason or str(exc))
        elif isinstance(exc, errors.NotFound) and self.by_id:
            # Deleted on the remote: the id is forgotten, so the key is looked up first if
            # it is written again (staff may have made it again).
            context.mirror.record_remote_missing(self.key)
            self.remote_missing()
        else:
            self.not_applied(exc)
            context.failed_otherwise(self.key, exc)

    # -- what each kind records when its request failed ----------------------------------
    def not_sent(self) -> None:
        """A 401/403 or a stop: nothing was applied (the journal, if any, stays)."""

    def outcome_unknown(self, exc: errors.SkuferryError) -> bool:
        """Whether ``exc`` leaves the write perhaps applied, perhaps not."""
        return isinstance(exc, errors.OutcomeUnknown)

    @abstractmethod
    def in_doubt(self, exc: errors.SkuferryError) -> None:
        """The outcome is unknown: left for a lookup or a read, never sent blind."""

    @abstractmethod
    def refused(self, exc: errors.Rejected) -> None:
        """The API refused the write: not resent until what it carries changes."""

    @abstractmethod
    def updates_refused(self, reason: str) -> None:
        """The server lacks the update method (``reason``): this write did not land."""

    def remote_missing(self) -> None:
        """A 404 on the product's id (its id already forgotten in the mirror)."""

    @abstractmethod
    def not_applied(self, exc: errors.SkuferryError) -> None:
        """Provably not applied (or a bad answer to a PATCH/PUT): retried next run."""

    # -- settling a lost PATCH/PUT answer by reading the product back -------------------
    # (a create's lost answer is settled by a lookup instead: it never reaches these)
    def expected(self, sent: Mapping[str, Any] | None) -> dict[str, Any]:
        """What the remote holds once this write went through: the fields to compare."""
        raise self._not_read_back()

    def found_applied(self, sent: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> None:
        """The read found the write applied: commit it (``sent``: the journal)."""
        raise self._not_read_back()

    def found_unapplied(
        self, remote: Mapping[str, Any], sent: Mapping[str, Any] | None, wanted: Mapping[str, Any]
    ) -> None:
        """The read found the write not applied: record what the remote holds (it is sent
        again)."""
        raise self._not_read_back()

    def _not_read_back(self) -> RuntimeError:
        return RuntimeError(f"a {self.action.kind.value} is settled by a lookup, not a read")

    def given_up(self, reason: str) -> None:
        """No read settled it in this run: the journal makes the next run send it again."""


class _ProductWrite(Write[Answer]):
    """A write carrying the source's product: a create, an update or a restore."""

    def __init__(self, action: Action, context: WriteContext) -> None:
        super().__init__(action, context)
        if action.product is None:
            raise RuntimeError(f"write action without a product: {action}")
        self.product: Product = action.product
        self.key = self.product.key

    def refused(self, exc: errors.Rejected) -> None:
        self.record_refused(exc.message or str(exc), exc.status)
        self.context.summary.refused(self.key, self.product.line, str(exc))
        log.warning(
            "sync.rejected",
            key=self.key,
            line=self.product.line,
            status=exc.status,
            reason=exc.message,
        )

    def record_refused(self, reason: str, status: int) -> None:
        self.context.mirror.record_rejected(self.product, reason, status=status)

    def updates_refused(self, reason: str) -> None:
        self.drift(reason)

    def drift(self, reason: str) -> None:
        """Changed in the source, not sent (updates are off): retried next run."""
        self.context.mirror.record_drift(self.product, reason)
        self.context.summary.drift += 1

    def not_applied(self, exc: errors.SkuferryError) -> None:
        status = exc.status if isinstance(exc, errors.HttpError | errors.BadResponse) else None
        self.context.mirror.record_failed(self.key, str(exc), product=self.product, status=status)


class Create(_ProductWrite[dict[str, Any]]):
    """The POST of a product whose absence on the remote is proven."""

    by_id = False
    _sent_at: float | None = None  # when the POST went out (set by the worker)

    def send(self) -> Callable[[], dict[str, Any]]:
        # The intent is committed before the POST: a lost answer is looked up, not re-sent.
        self.context.mirror.open_intent(self.product, run_id=self.context.run_id)
        return self._post

    def _post(self) -> dict[str, Any]:
        """The worker's POST, timed: a create sent after a lost answer is a witness."""
        self._sent_at = self.context.clock()
        return self.context.client.create_product(self.product.payload)

    def applied(self, answer: dict[str, Any]) -> None:
        context = self.context
        context.mirror.record_created(self.product, str(answer["id"]))
        context.summary.created += 1
        if self._sent_at is not None:
            context.doubts.created(str(answer["id"]), sent=self._sent_at, answered=context.clock())
        log.debug("sync.created", key=self.key, remote_id=answer["id"])

    def not_sent(self) -> None:
        self.context.mirror.close_intent(self.key, outcome=None)  # never went out

    def outcome_unknown(self, exc: errors.SkuferryError) -> bool:
        return isinstance(exc, errors.OutcomeUnknown | errors.BadResponse)

    def in_doubt(self, exc: errors.SkuferryError) -> None:
        # The POST may have landed: keep the intent open and resolve it by lookup.
        context = self.context
        context.mirror.record_failed(
            self.key,
            f"outcome unknown: {exc}",
            product=self.product,
            outcome=history.SENT,  # still open: the lookup tells
        )
        context.unknown.append(self.product)
        context.doubts.in_doubt(self.key, lost=context.clock())
        log.warning("sync.create.unknown", key=self.key, error=str(exc))
        if isinstance(exc, errors.BadResponse):
            context.fatal = exc

    def not_applied(self, exc: errors.SkuferryError) -> None:
        # Provably not applied: nothing to look up (the intent and its history closed at once).
        status = exc.status if isinstance(exc, errors.HttpError | errors.BadResponse) else None
        self.context.mirror.close_intent(
            self.key, outcome=history.FAILED, status=status, error=str(exc)
        )
        super().not_applied(exc)


class Update(_ProductWrite[Outcome]):
    """A PATCH/PUT bringing a product known by id in step with the source."""

    restore = False

    def send(self) -> Callable[[], Outcome] | None:
        context, product = self.context, self.product
        sent = context.mirror.payload(self.key)
        if context.updater.nothing_to_send(product, sent, restore=self.restore):
            # Only create-only fields (or nothing the remote sees) changed: no request at all.
            context.mirror.record_updated(product, self.remote_id, sent=sent)
            self.count(wrote=False)
            return None
        if context.updates_off_reason is not None:
            self.drift(context.updates_off_reason)
            return None
        # Journalled before the PATCH/PUT: an answer lost leaves fields the remote may hold.
        in_flight = context.updater.in_flight(product, sent, restore=self.restore)
        context.mirror.record_update_sent(
            self.key,
            in_flight,
            patch_digest=self.in_doubt_as(),
            kind=self.action.kind.value,
            sending=context.updater.sending(product, sent, restore=self.restore),
        )
        return functools.partial(
            context.updater.update, self.remote_id, product, sent, restore=self.restore
        )

    def in_doubt_as(self) -> str | None:
        """The digest a product is held under while this write is on the wire (None: as is)."""
        return None

    def applied(self, answer: Outcome) -> None:
        self.commit(answer)
        self.count(wrote=answer.wrote)
        if answer.wrote:
            log.debug("sync.updated", key=self.key, remote_id=self.remote_id)

    def commit(self, outcome: Outcome) -> None:
        """The update went through (or needed no write): the fields now last sent."""
        context = self.context
        if outcome.wrote:
            context.updates_confirmed = True
        context.mirror.record_updated(
            self.product,
            self.remote_id,
            sent=outcome.sent,
            wrote=outcome.wrote,
            change=outcome.change,
        )
        context.summary.adopted += outcome.adopted

    def count(self, *, wrote: bool) -> None:
        if wrote:
            self.context.summary.updated += 1
        else:
            self.context.summary.unchanged += 1  # found in step: linked without a write

    def in_doubt(self, exc: errors.SkuferryError) -> None:
        self.context.unsettled.append(self.action)  # read back in this run
        log.warning("sync.update.unknown", key=self.key, error=str(exc))

    def remote_missing(self) -> None:
        self.context.missing.append(self.product)  # the second look finds it or creates it
        log.warning("sync.update.missing", key=self.key, remote_id=self.action.remote_id)

    def expected(self, sent: Mapping[str, Any] | None) -> dict[str, Any]:
        return self.context.updater.expected(self.product, sent, restore=self.restore)

    def found_applied(self, sent: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> None:
        now_sent = after_update(sent, wanted, self.product.payload)
        self.context.mirror.record_updated(self.product, self.remote_id, sent=now_sent)
        self.count(wrote=True)

    def found_unapplied(
        self, remote: Mapping[str, Any], sent: Mapping[str, Any] | None, wanted: Mapping[str, Any]
    ) -> None:
        # The next diff is against what the remote holds.
        names = {*(sent or {}), *self.product.payload, *wanted}
        self.context.mirror.remember_remote(self.key, {k: remote[k] for k in names if k in remote})

    def given_up(self, reason: str) -> None:
        self.context.mirror.record_failed(
            self.key, reason, product=self.product, outcome=history.UNKNOWN
        )


class Restore(Update):
    """An archived product back in the source: its update plus the ``[gone] restore`` table.

    It stays ARCHIVED until it is known live: refused, unsent or failed, the next run
    restores it again.
    """

    restore = True

    def in_doubt_as(self) -> str | None:
        return self.context.gone.archiving or ""  # may be live: archived in doubt

    def applied(self, answer: Outcome) -> None:
        self.commit(answer)
        self.count(wrote=answer.wrote)
        log.info("sync.restored", key=self.key, remote_id=self.remote_id)

    def count(self, *, wrote: bool) -> None:
        self.context.summary.restored += 1

    def record_refused(self, reason: str, status: int) -> None:
        # Restored (restore table and all) when the data change.
        self.context.mirror.record_restore_refused(self.product, reason, status=status)

    def drift(self, reason: str) -> None:
        self.context.mirror.record_unsent(self.key, reason, state=State.ARCHIVED)
        self.context.summary.drift += 1

    def not_applied(self, exc: errors.SkuferryError) -> None:
        self.context.mirror.record_unsent(self.key, str(exc), state=State.ARCHIVED)

    def given_up(self, reason: str) -> None:
        self.context.mirror.record_unsent(
            self.key, reason, state=State.ARCHIVED, outcome=history.UNKNOWN
        )


class Archive(Write[Outcome]):
    """The ``[gone]`` patch of a product that left the source."""

    def __init__(self, action: Action, context: WriteContext) -> None:
        super().__init__(action, context)
        if action.key is None:
            raise RuntimeError(f"write action without a key: {action}")
        self.key = action.key

    def send(self) -> Callable[[], Outcome] | None:
        context = self.context
        if context.updates_off_reason is not None:
            if self._in_doubt():
                # An earlier [gone] PATCH may have landed: a read tells, not a guess.
                context.unsettled.append(self.action)
            else:  # the remote holds it live: planned again next run
                reason = f"not archived: {context.updates_off_reason}"
                context.mirror.record_unsent(self.key, reason, state=State.DRIFT)
                context.summary.drift += 1
            return None
        # Journalled before the PATCH: an answer lost leaves a product that may be archived.
        context.mirror.record_archive_sent(
            self.key, patch_digest=context.gone.archiving or "", patch=context.gone.patch
        )
        return functools.partial(
            context.updater.archive, self.remote_id, context.mirror.payload(self.key)
        )

    def _in_doubt(self) -> bool:
        """Whether the mirror holds the product ARCHIVED in doubt: its [gone] PATCH went out
        and the answer never came (the archive's journal)."""
        row = self.context.mirror.rows([self.key]).get(self.key)
        return row is not None and archive_in_doubt(row, self.context.gone.archiving)

    def applied(self, answer: Outcome) -> None:
        context = self.context
        if answer.wrote:
            context.updates_confirmed = True
        context.mirror.record_archived(self.key, answer.sent)
        context.summary.archived += 1
        log.info("sync.archived", key=self.action.key, remote_id=self.remote_id)

    # A 401/403 or a stop: the journal stays (ARCHIVED in doubt), sent again next run.

    def in_doubt(self, exc: errors.SkuferryError) -> None:
        self.context.unsettled.append(self.action)  # read back in this run
        log.warning("sync.archive.unknown", key=self.key, error=str(exc))

    def refused(self, exc: errors.Rejected) -> None:
        reason = f"the [gone] patch was refused: {exc.message or exc}"
        digest = self.context.gone.archiving or ""
        self.context.mirror.record_archive_refused(
            self.key, reason, patch_digest=digest, status=exc.status
        )
        self.context.summary.refused(self.key, None, reason)
        log.warning("sync.archive.rejected", key=self.key, status=exc.status, reason=exc.message)

    def updates_refused(self, reason: str) -> None:
        # This PATCH was not applied, but an earlier one (the journal was in doubt before
        # it went out) may have been: a read tells, then drift if it did not.
        self.context.unsettled.append(self.action)

    def remote_missing(self) -> None:
        # Nothing left to archive: PENDING without a remote id.
        log.warning("sync.archive.missing", key=self.key, remote_id=self.action.remote_id)

    def not_applied(self, exc: errors.SkuferryError) -> None:
        if not isinstance(exc, errors.BadResponse):
            self.context.mirror.record_failed(self.key, str(exc))  # provably not applied
        # else the journal stays: ARCHIVED in doubt

    def expected(self, sent: Mapping[str, Any] | None) -> dict[str, Any]:
        return dict(self.context.gone.patch)

    def found_applied(self, sent: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> None:
        self.context.mirror.record_archived(self.key, gone_sent(sent, wanted))
        self.context.summary.archived += 1

    def found_unapplied(
        self, remote: Mapping[str, Any], sent: Mapping[str, Any] | None, wanted: Mapping[str, Any]
    ) -> None:
        # Not archived: no longer in doubt, whatever the resend does.
        self.context.mirror.record_unsent(
            self.key, "the [gone] patch is not on the remote", state=State.DRIFT
        )

    # Given up: an archive unread stays ARCHIVED in doubt (its journal), sent again.


_KINDS: dict[Kind, type[Write[Any]]] = {
    Kind.CREATE: Create,
    Kind.UPDATE: Update,
    Kind.RESTORE: Restore,
    Kind.ARCHIVE: Archive,
}
