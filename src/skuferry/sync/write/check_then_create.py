"""Check-then-create: everything that reads the remote index.

The API lists no lookup filter, so whether a product already exists on the
remote is learnt by walking ``GET /api/v1/products`` into a ``RemoteIndex``.
From it: creates become adoptions (or reports of remote duplicates), open
intents of lost creates are settled, ``--verify`` repairs remote edits and
deletions, and a second look after the writes resolves creates whose
response was lost in this very run.

What the lookups find is counted in the run's summary (``models.RunSummary``):
adoptions, remote duplicates, ``--verify`` repairs.

Absence is proven, never assumed: every walk reports its verdict to the run's
ledger, and a product the walk did not find is created only when
the ledger says so (``adopt_or_create``, the one place that decides it). A create
in doubt is settled by a walk only once the list could show it (the doubt clock), and
so is a product whose remote id answered 404 (staff may have made it again just
before: the list shows that only later); a product known by id is read by id before
it is ever created again (``--verify``).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from skuferry import errors, logs
from skuferry.completeness import Ledger, Reader, Verdict
from skuferry.config.schema import Settings
from skuferry.models import Action, Kind, Product, Progress, RunSummary
from skuferry.state import history
from skuferry.state.mirror import Mirror
from skuferry.state.planstore import PlanStore
from skuferry.state.remoteindex import RemoteIndex
from skuferry.sync.write import fields, walks
from skuferry.sync.write.doubt import Clock, WallClock
from skuferry.sync.write.fields import Ownership
from skuferry.sync.write.writer import Writer

if TYPE_CHECKING:
    from skuferry.remote.client import RemoteApi  # a type; importing httpx costs ~0.1 s

log = logs.get(__name__)

# A lost create's history outcome when the lookup proved it absent.
_LOOKED_UP = "its answer was lost, and a lookup showed it never landed"


MAX_SECOND_LOOKS = 6  # walks of one second look waiting for the list to show its creates

InDoubt = Callable[[str], bool]  # key -> a product of it may be on the CMS, not listed yet
Defer = Callable[[Product], bool]  # hands such a create to the second look; True if taken


def walk_proven(
    client: RemoteApi,
    mirror: Mirror,
    settings: Settings,
    on_progress: Progress | None,
    ledger: Ledger,
    *,
    clock: Callable[[], float] = time.time,
    watch: Callable[[str, float], None] | None = None,
    before_writes: bool = False,
) -> tuple[RemoteIndex, walks.Walked]:
    """Walk the CMS into the mirror's remote index; the verdict goes to ``ledger``.

    ``before_writes``: the run's first walk. A list that shows no product while the state
    knows one on the CMS since longer than ``[api] list_lag_s`` proves nothing (an index
    being rebuilt answers so); younger ones the list may rightly not show yet, and a
    second look's walk may rightly miss this run's creates.
    """
    index = mirror.remote_index(settings.mapping.key)  # the field both sides share
    walked = walks.walk(
        client,
        index,
        ledger,
        page_size=settings.api.page_size,
        on_page=on_progress,
        clock=clock,
        watch=watch,
    )
    if before_writes and walked.verdict.complete and index.products == index.keyless == 0:
        known = mirror.synced_before(clock() - settings.api.list_lag_s)  # the mirror's clock
        if known is not None:
            reason = (
                "the list answered no product while the state knows products on the CMS "
                f"(e.g. {known[0]}, id {known[1]}); `sync --verify` reads them by id"
            )
            verdict = Verdict(Reader.WALK, walks.WHERE, complete=False, reason=reason)
            walked = dataclasses.replace(walked, verdict=ledger.report(verdict))
    if walked.verdict.complete:
        # Record what the walk found, so a remote product the source adds later is adopted,
        # never POSTed blind because "the mirror has walked". Only a complete walk says so.
        mirror.mark_walked(time.time(), remote=index.pairs())
    else:
        log.warning("remote.walk.unproven", reason=walked.verdict.reason)
    return index, walked


def in_doubt(mirror: Mirror, settings: Settings, now: float, run_id: int | None) -> InDoubt:
    """Keys a walk begun after ``now`` may not show though the CMS holds a product of them
    (``Mirror.unseen_since``): a create an earlier run left in doubt (one a killed run
    left, since now), or a product whose remote id answered 404, earlier or in this run.
    Settled by absence only once ``[api] list_lag_s`` has passed since then (no witness
    crosses runs)."""
    bound = settings.api.list_lag_s

    def check(key: str) -> bool:
        since = mirror.unseen_since(key, now=now, run_id=run_id)
        return since is not None and now - since < bound

    return check


def handed_over(doubt: InDoubt, writer: Writer, mirror: Mirror) -> Defer:
    """A create the list may not show yet (``in_doubt``) is handed to this run's second
    look, which waits for the list, instead of being sent or held: a lost create's with
    the creates in doubt (``writer.unknown``), a 404'd product's with the products
    deleted remotely (``writer.missing``)."""

    def defer(product: Product) -> bool:
        if not doubt(product.key):
            return False
        now = writer.clock()
        since = mirror.unseen_since(product.key, now=now, run_id=writer.context.run_id)
        writer.doubts.in_doubt(product.key, lost=since if since is not None else now)
        if mirror.has_intent(product.key):
            writer.unknown.append(product)
            log.info("sync.create.in_doubt", key=product.key, lost_at=since)
        else:
            writer.missing.append(product)
            log.info("sync.create.unlisted_404", key=product.key, since=since)
        return True

    return defer


def _walk_reasons(ledger: Ledger) -> list[str]:
    return [v.reason for v in ledger.verdicts() if v.reader is Reader.WALK and not v.complete]


def unproven(ledger: Ledger) -> errors.ApiError | None:
    """The run's end when a walk stayed incomplete: exit 3, naming why (the writes that
    needed no proof of absence were made)."""
    reasons = [f"walk {walks.WHERE}: not complete: {why}" for why in _walk_reasons(ledger)]
    if not reasons:
        return None
    return errors.ApiError(
        f"{reasons[0]}; products the walk did not find were not created (their absence is "
        "not proven); everything else was written, and the next run looks them up again"
    )


def orphan_intents(store: PlanStore, mirror: Mirror) -> list[str]:
    """Open intents of keys no longer in the source: a lost create nobody will retry."""
    intents = [key for key, _digest in mirror.open_intents()]
    if not intents:
        return []
    gone = set(store.keys(Kind.GONE))
    return [key for key in intents if key in gone]


def settle(
    keys: list[str],
    index: RemoteIndex,
    mirror: Mirror,
    ledger: Ledger | None = None,
    doubt: InDoubt | None = None,
) -> None:
    """Link what a lost create made (it is then marked gone like its key), else close it:
    only when absence is proven, else the intent stays open for a later walk."""
    for key in keys:
        product = mirror.intent_product(key)
        found = index.find(key)
        if product is not None and len(found) == 1:
            mirror.record_created(product, found[0][0])
        elif found or (
            (ledger is None or ledger.may_create_unseen()) and not (doubt and doubt(key))
        ):
            if found:  # several products hold the key: the lost POST may be one of them
                mirror.close_intent(key, outcome=history.UNKNOWN)
            else:
                mirror.close_intent(key, outcome=history.FAILED, error=_LOOKED_UP)


class Checked:
    """Check-then-create over the write actions: each create is looked up in the index.

    Products found in step are recorded in batches (``flush``), not one durable
    transaction each: 20,000 adoptions cost seconds otherwise.
    """

    BATCH = 500

    def __init__(
        self,
        index: RemoteIndex,
        mirror: Mirror,
        summary: RunSummary,
        ownership: Ownership | None = None,
        *,
        verify: bool = False,
        client: RemoteApi | None = None,
        defer: Defer | None = None,
    ) -> None:
        self._index, self._mirror, self._summary = index, mirror, summary
        self._ownership = ownership
        self._verify = verify
        self._client = client
        self._defer = defer
        self._in_step: list[tuple[Product, str]] = []

    def __call__(self, writes: Iterator[Action]) -> Iterator[Action]:
        for action in writes:
            if action.kind in (Kind.UPDATE, Kind.RESTORE) and self._verify:
                checked = verified_update(
                    action,
                    self._index,
                    self._mirror,
                    self._summary,
                    self._ownership,
                    client=self._client,
                    defer=self._defer,
                )
                if checked is not None:
                    yield checked
                continue
            if action.kind is not Kind.CREATE:
                yield action
                continue
            resolved = adopt_or_create(
                action,
                self._index,
                self._mirror,
                self._summary,
                batch=self._in_step,
                ownership=self._ownership,
                defer=self._defer,
            )
            if len(self._in_step) >= self.BATCH:
                self.flush()
            if resolved is not None:
                yield resolved

    def flush(self) -> None:
        self._mirror.record_in_step(self._in_step)
        self._in_step = []


def verified_update(
    action: Action,
    index: RemoteIndex,
    mirror: Mirror,
    summary: RunSummary,
    ownership: Ownership | None = None,
    *,
    client: RemoteApi | None = None,
    defer: Defer | None = None,
) -> Action | None:
    """--verify: an update (or restore) goes against what the remote holds now, not what was
    last sent. A 404 makes it a create, which ``defer`` hands to the second look until the
    list could show the product made again on the CMS.

    A PATCH carries only the fields changed since they were last sent, so without this a
    field edited on the CMS stays edited when the source changed another one, and a
    product deleted there is never noticed when nothing owned changed (no request at all).
    """
    product, remote_id = action.product, action.remote_id
    if product is None or remote_id is None:
        return action
    try:
        body = _listed_or_read(index, client, remote_id, product.key, summary)
    except _Unread:
        return None
    if body is None:
        mirror.record_remote_missing(product.key)
        summary.repair(planned_unchanged=False)
        log.warning("verify.missing", key=product.key, remote_id=remote_id)
        create = Action(Kind.CREATE, product.key, product, line=product.line)
        return adopt_or_create(create, index, mirror, summary, ownership=ownership, defer=defer)
    sent = mirror.payload(product.key)
    if sent is not None and (edited := fields.differing(sent, body, ownership or Ownership())):
        summary.repair(planned_unchanged=False)
        log.warning("verify.edited", key=product.key, remote_id=remote_id, fields=edited)
        mirror.remember_remote(
            product.key, {k: body[k] for k in {*sent, *product.payload} if k in body}
        )
    return action


def adopt_or_create(
    action: Action,
    index: RemoteIndex,
    mirror: Mirror,
    summary: RunSummary,
    *,
    batch: list[tuple[Product, str]] | None = None,
    ownership: Ownership | None = None,
    defer: Defer | None = None,
) -> Action | None:
    """Adopt the one remote product holding this key, report several, or create.

    Create only when absence is proven: the run's walks are complete (the ledger says
    so, here and nowhere else); a create left in doubt by an earlier run, or a product
    whose remote id answered 404, that the list may not show yet goes to the second
    look (``defer``), which waits for the list.
    Otherwise the product is held: not created, failed with the reason, looked up again
    next run.

    In step means: the fields skuferry owns match (create-only ones and fields
    only the remote has are not looked at), and then nothing is written. A
    product found in step is appended to ``batch`` when given (the caller
    records the batch), else recorded at once. One that differs is linked with
    the remote's values as "last sent", so its update carries only what differs.
    """
    product = action.product
    if product is None:
        raise RuntimeError(f"create action without a product: {action.key}")
    matches = index.find(product.key)
    if not matches:
        ledger = summary.completeness
        if not ledger.may_create_unseen():
            why = "; ".join(_walk_reasons(ledger))
            _held(summary, product, f"the list of the CMS was not read whole ({why})")
            return None
        if defer is not None and defer(product):
            return None
        if mirror.has_intent(product.key):
            # looked up: the lost POST never landed
            mirror.close_intent(product.key, outcome=history.FAILED, error=_LOOKED_UP)
        return Action(Kind.CREATE, product.key, product, line=product.line)
    if len(matches) > 1:
        ids = [rid for rid, _ in matches]
        mirror.record_duplicate(product.key, ids)
        summary.duplicate(
            product.key,
            product.line,
            f"the remote holds {len(ids)} products with this key ({', '.join(ids[:5])}); "
            "not creating another — merge them on the remote",
        )
        return None
    remote_id, body = matches[0]
    in_step = not fields.differing(product.payload, body, ownership or Ownership())
    if in_step and batch is not None:
        batch.append((product, remote_id))
    else:
        mirror.record_adopted(product, remote_id, in_step=in_step, remote=body)
    summary.adopted += 1
    log.debug("sync.adopted", key=product.key, remote_id=remote_id, in_step=in_step)
    return (
        None
        if in_step
        else Action(Kind.UPDATE, product.key, product, remote_id=remote_id, line=product.line)
    )


def _held(summary: RunSummary, product: Product, why: str) -> None:
    """A create whose absence is not proven: not sent, failed with the reason (exit >= 1),
    looked up again by the next run's walk."""
    summary.fail(product.key, f"not created: {why}; looked up again next run")
    log.warning("sync.create.held", key=product.key, why=why)


class _Unread(Exception):  # noqa: N818 - a signal, not an error: neither found nor missing
    """A read by id failed: the product is neither found nor proven missing (failed)."""


def _listed_or_read(
    index: RemoteIndex,
    client: RemoteApi | None,
    remote_id: str,
    key: str,
    summary: RunSummary,
) -> dict[str, Any] | None:
    """The remote product ``remote_id`` as the walk listed it, else as a GET by id reads it:
    None only when the id answers 404. A list can miss a product (a page shifted by a
    delete, a lagging index); its id cannot, so nothing known by id is re-created unread."""
    body = index.by_id(remote_id)
    if body is not None or client is None:
        return body
    try:
        body = client.get_product(remote_id)
    except errors.NotFound:
        return None
    except (errors.AuthError, errors.QuotaExceeded):
        raise  # the run's end, as in the writer: not one failed product per remote id
    except errors.ApiError as exc:
        summary.fail(key, f"remote id {remote_id} is not on the list and could not be read: {exc}")
        log.warning("verify.unread", key=key, remote_id=remote_id, error=str(exc))
        raise _Unread(remote_id) from exc
    log.info("verify.unlisted", key=key, remote_id=remote_id)
    return body


def repairs(
    store: PlanStore,
    index: RemoteIndex,
    mirror: Mirror,
    summary: RunSummary,
    ownership: Ownership | None = None,
    *,
    client: RemoteApi | None = None,
    defer: Defer | None = None,
) -> Iterator[Action]:
    """--verify: products deleted or edited on the remote side are put right (one deleted
    is created again once the list could show it made again there: ``defer``).

    Only fields skuferry owns are compared: a create-only field edited on the CMS is its own.
    """
    own = ownership or Ownership()
    unchanged = set(store.keys(Kind.UNCHANGED))
    # Materialised: the loop below writes to the products table it would be reading.
    for key, remote_id, digest in list(mirror.synced_items()):
        if key not in unchanged:
            continue
        payload = mirror.payload(key)  # the fields last sent
        if payload is None:
            continue
        product = Product(key=key, payload=payload, digest=digest, line=0)
        try:
            body = _listed_or_read(index, client, remote_id, key, summary)
        except _Unread:
            continue
        if body is None:
            mirror.record_remote_missing(key)
            summary.repair(planned_unchanged=True)
            log.warning("verify.missing", key=key, remote_id=remote_id)
            resolved = adopt_or_create(
                Action(Kind.CREATE, key, product),
                index,
                mirror,
                summary,
                ownership=own,
                defer=defer,
            )
        elif edited := fields.differing(payload, body, own):
            summary.repair(planned_unchanged=True)
            log.warning("verify.edited", key=key, remote_id=remote_id, fields=edited)
            # Diffed against what the remote holds, the update carries exactly the edited fields.
            mirror.remember_remote(key, {k: body[k] for k in payload if k in body})
            resolved = Action(Kind.UPDATE, key, product, remote_id=remote_id)
        else:
            continue
        if resolved is not None:
            yield resolved


def second_look(
    client: RemoteApi,
    writer: Writer,
    mirror: Mirror,
    settings: Settings,
    *,
    clock: Clock | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Creates whose response was lost, products deleted remotely: walk, then act.

    A create in doubt that the walk does not show is sent again only once the list could
    show it (the doubt clock), and so is a product deleted remotely (from its 404: staff
    may have made it again before); until then the second look waits and walks again (at
    most ``MAX_SECOND_LOOKS`` walks, the last once the bound has passed). What is still in
    doubt stays in ``writer.unknown`` for ``give_up``: its intent stays open and the next
    run looks it up first.
    """
    clock = clock or WallClock()
    doubts = writer.doubts
    for product in writer.missing:  # deleted remotely: made again there before the 404?
        since = mirror.unseen_since(product.key)
        if since is not None:
            doubts.in_doubt(product.key, lost=since)
    todo = writer.unknown + writer.missing
    writer.unknown, writer.missing = [], []
    log.info("sync.second_look", products=len(todo))
    ownership = Ownership.from_mapping(settings.mapping)
    retries: list[Action] = []
    for look in range(1, MAX_SECOND_LOOKS + 1):
        ledger = writer.summary.completeness
        index, walked = walk_proven(
            client, mirror, settings, None, ledger, clock=clock, watch=doubts.watch
        )
        doubts.after(walked)
        try:
            todo = _look_once(
                todo,
                index,
                walked,
                mirror=mirror,
                writer=writer,
                ownership=ownership,
                retries=retries,
            )
        finally:
            index.close()
        if not todo or look == MAX_SECOND_LOOKS or (stop is not None and stop.is_set()):
            break
        last = look == MAX_SECOND_LOOKS - 1  # the walk to come is the last: at the bound
        wait = doubts.wait_s([p.key for p in todo], clock(), last=last)
        if wait is None:
            break
        log.info("sync.second_look.waiting", products=len(todo), wait_s=round(wait, 3))
        if wait > 0:
            clock.wait(wait, stop)
    lag = doubts.lag_s()
    if lag is not None:
        log.info("remote.list_lag", lag_s=round(lag, 3), creates_seen=len(doubts.seen))
    if todo:
        reason = doubts.broken or "the list did not show the run's later creates in time"
        log.warning("sync.second_look.in_doubt", products=len(todo), why=reason)
    writer.unknown.extend(todo)  # still in doubt: give_up fails them, the intent stays open
    writer.run(retries)


def _look_once(
    todo: list[Product],
    index: RemoteIndex,
    walked: walks.Walked,
    *,
    mirror: Mirror,
    writer: Writer,
    ownership: Ownership,
    retries: list[Action],
) -> list[Product]:
    """Settle what one walk can settle; the products still in doubt."""
    waiting: list[Product] = []
    for product in todo:
        matches = index.find(product.key)
        if len(matches) == 1 and mirror.has_intent(product.key):
            remote_id, body = matches[0]
            if fields.differing(product.payload, body, ownership):
                mirror.record_adopted(product, remote_id, in_step=False, remote=body)
                retries.append(Action(Kind.UPDATE, product.key, product, remote_id=remote_id))
            else:
                mirror.record_created(product, remote_id)  # our lost POST did land
                writer.summary.created += 1
            continue
        in_doubt = product.key in writer.doubts.lost
        if not matches and in_doubt and not writer.doubts.proven_absent(product.key, walked):
            waiting.append(product)  # the list may not show it yet: not sent again
            continue
        resolved = adopt_or_create(
            Action(Kind.CREATE, product.key, product),
            index,
            mirror,
            writer.summary,
            ownership=ownership,
        )
        if resolved is not None:
            retries.append(resolved)
    return waiting


def give_up(writer: Writer) -> None:
    """Creates whose outcome no second look settled (the run stopped or ended early), and
    products deleted remotely, are failed: the next run looks them up before any re-send."""
    for product in writer.unknown + writer.missing:
        writer.summary.fail(
            product.key, "outcome unknown; will be looked up before any re-send", replace=False
        )
    writer.unknown, writer.missing = [], []
