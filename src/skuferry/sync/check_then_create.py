"""Check-then-create: everything that reads the remote index.

The API lists no lookup filter, so whether a product already exists on the
remote is learnt by walking ``GET /api/v1/products`` into a ``RemoteIndex``.
From it: creates become adoptions (or reports of remote duplicates), open
intents of lost creates are settled, ``--verify`` repairs remote edits and
deletions, and a second look after the writes resolves creates whose
response was lost in this very run.

What the lookups find is counted in the run's summary (``models.RunSummary``):
adoptions, remote duplicates, ``--verify`` repairs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from skuferry import logs
from skuferry.config.schema import Settings
from skuferry.models import Action, Kind, Product, Progress, RunSummary
from skuferry.state.mirror import Mirror
from skuferry.state.planstore import PlanStore
from skuferry.state.remoteindex import RemoteIndex
from skuferry.sync import fields
from skuferry.sync.fields import Ownership
from skuferry.sync.writer import Writer

if TYPE_CHECKING:
    from skuferry.remote.client import RemoteApi  # a type; importing httpx costs ~0.1 s

log = logs.get(__name__)


def walk(
    client: RemoteApi, mirror: Mirror, settings: Settings, on_progress: Progress | None
) -> RemoteIndex:
    index = mirror.remote_index(settings.mapping.key)  # the field both sides share
    index.load(client, page_size=settings.api.page_size, on_page=on_progress)
    # Record what the walk found, so a remote product the source adds later is adopted,
    # never POSTed blind because "the mirror has walked".
    mirror.mark_walked(time.time(), remote=index.pairs())
    return index


def orphan_intents(store: PlanStore, mirror: Mirror) -> list[str]:
    """Open intents of keys no longer in the source: a lost create nobody will retry."""
    intents = [key for key, _digest in mirror.open_intents()]
    if not intents:
        return []
    gone = set(store.keys(Kind.GONE))
    return [key for key in intents if key in gone]


def settle(keys: list[str], index: RemoteIndex, mirror: Mirror) -> None:
    """Link what a lost create made (it is then marked gone like its key), else close it."""
    for key in keys:
        product = mirror.intent_product(key)
        found = index.find(key)
        if product is not None and len(found) == 1:
            mirror.record_created(product, found[0][0])
        else:
            mirror.close_intent(key)


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
    ) -> None:
        self._index, self._mirror, self._summary = index, mirror, summary
        self._ownership = ownership
        self._verify = verify
        self._in_step: list[tuple[Product, str]] = []

    def __call__(self, writes: Iterator[Action]) -> Iterator[Action]:
        for action in writes:
            if action.kind in (Kind.UPDATE, Kind.RESTORE) and self._verify:
                checked = verified_update(
                    action, self._index, self._mirror, self._summary, self._ownership
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
) -> Action | None:
    """--verify: an update (or restore) goes against what the remote holds now, not what was
    last sent.

    A PATCH carries only the fields changed since they were last sent, so without this a
    field edited on the CMS stays edited when the source changed another one, and a
    product deleted there is never noticed when nothing owned changed (no request at all).
    """
    product, remote_id = action.product, action.remote_id
    if product is None or remote_id is None:
        return action
    body = index.by_id(remote_id)
    if body is None:
        mirror.record_remote_missing(product.key)
        summary.repair(planned_unchanged=False)
        log.warning("verify.missing", key=product.key, remote_id=remote_id)
        create = Action(Kind.CREATE, product.key, product, line=product.line)
        return adopt_or_create(create, index, mirror, summary, ownership=ownership)
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
) -> Action | None:
    """Adopt the one remote product holding this key, report several, or create.

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
        if mirror.has_intent(product.key):
            mirror.close_intent(product.key)  # looked up: the lost POST never landed
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


def repairs(
    store: PlanStore,
    index: RemoteIndex,
    mirror: Mirror,
    summary: RunSummary,
    ownership: Ownership | None = None,
) -> Iterator[Action]:
    """--verify: products deleted or edited on the remote side are put right.

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
        body = index.by_id(remote_id)
        if body is None:
            mirror.record_remote_missing(key)
            summary.repair(planned_unchanged=True)
            log.warning("verify.missing", key=key, remote_id=remote_id)
            resolved = adopt_or_create(
                Action(Kind.CREATE, key, product), index, mirror, summary, ownership=own
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


def second_look(client: RemoteApi, writer: Writer, mirror: Mirror, settings: Settings) -> None:
    """Creates whose response was lost, products deleted remotely: one fresh walk, then act."""
    todo = writer.unknown + writer.missing
    writer.unknown, writer.missing = [], []
    log.info("sync.second_look", products=len(todo))
    ownership = Ownership.from_mapping(settings.mapping)
    index = walk(client, mirror, settings, None)
    try:
        retries: list[Action] = []
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
            resolved = adopt_or_create(
                Action(Kind.CREATE, product.key, product),
                index,
                mirror,
                writer.summary,
                ownership=ownership,
            )
            if resolved is not None:
                retries.append(resolved)
        writer.run(retries)
    finally:
        index.close()


def give_up(writer: Writer) -> None:
    """Creates whose outcome no second look settled (the run stopped or ended early), and
    products deleted remotely, are failed: the next run looks them up before any re-send."""
    for product in writer.unknown + writer.missing:
        writer.summary.fail(
            product.key, "outcome unknown; will be looked up before any re-send", replace=False
        )
    writer.unknown, writer.missing = [], []
