"""Check-then-create: everything that reads the remote index.

The API lists no lookup filter, so whether a product already exists on the
remote is learnt by walking ``GET /api/v1/products`` into a ``RemoteIndex``.
From it: creates become adoptions (or reports of remote duplicates), open
intents of lost creates are settled, ``--verify`` repairs remote edits and
deletions, and a second look after the writes resolves creates whose
response was lost in this very run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from skuferry import canonical, logs
from skuferry.config.load import Settings
from skuferry.models import Action, Kind, Product, Progress, RunSummary
from skuferry.state.mirror import Mirror
from skuferry.state.planstore import PlanStore
from skuferry.state.remoteindex import RemoteIndex
from skuferry.sync.writer import Writer

log = logs.get(__name__)


def walk(
    client: Any, mirror: Mirror, settings: Settings, on_progress: Progress | None
) -> RemoteIndex:
    index = RemoteIndex(mirror.db.conn, settings.mapping.key)  # the field both sides share
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

    def __init__(self, index: RemoteIndex, mirror: Mirror, summary: RunSummary) -> None:
        self._index, self._mirror, self._summary = index, mirror, summary
        self._in_step: list[tuple[Product, str]] = []

    def __call__(self, writes: Iterator[Action]) -> Iterator[Action]:
        for action in writes:
            if action.kind is not Kind.CREATE:
                yield action
                continue
            resolved = adopt_or_create(
                action, self._index, self._mirror, self._summary, batch=self._in_step
            )
            if len(self._in_step) >= self.BATCH:
                self.flush()
            if resolved is not None:
                yield resolved

    def flush(self) -> None:
        self._mirror.record_in_step(self._in_step)
        self._in_step = []


def adopt_or_create(
    action: Action,
    index: RemoteIndex,
    mirror: Mirror,
    summary: RunSummary,
    *,
    batch: list[tuple[Product, str]] | None = None,
) -> Action | None:
    """Adopt the one remote product holding this key, report several, or create.

    A product found in step is appended to ``batch`` when given (the caller
    records the batch), else recorded at once.
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
        summary.duplicates += 1
        summary.add_problem(product.key,
            product.line,
            f"the remote holds {len(ids)} products with this key ({', '.join(ids[:5])}); "
            "not creating another — merge them on the remote",
        )
        return None
    remote_id, body = matches[0]
    in_step = not canonical.differs(product.payload, body)
    if in_step and batch is not None:
        batch.append((product, remote_id))
    else:
        mirror.record_adopted(product, remote_id, in_step=in_step)
    summary.adopted += 1
    log.debug("sync.adopted", key=product.key, remote_id=remote_id, in_step=in_step)
    return (
        None
        if in_step
        else Action(Kind.UPDATE, product.key, product, remote_id=remote_id, line=product.line)
    )


def repairs(
    store: PlanStore, index: RemoteIndex, mirror: Mirror, summary: RunSummary
) -> Iterator[Action]:
    """--verify: products deleted or edited on the remote side are put right."""
    unchanged = set(store.keys(Kind.UNCHANGED))
    repaired = 0
    # Materialised: the loop below writes to the products table it would be reading.
    for key, remote_id, _digest in list(mirror.synced_items()):
        if key not in unchanged:
            continue
        payload = mirror.payload(key)
        if payload is None:
            continue
        product = Product(key=key, payload=payload, digest=canonical.digest(payload), line=0)
        body = index.by_id(remote_id)
        if body is None:
            mirror.record_remote_missing(key)
            summary.unchanged -= 1
            repaired += 1
            log.warning("verify.missing", key=key, remote_id=remote_id)
            resolved = adopt_or_create(Action(Kind.CREATE, key, product), index, mirror, summary)
        elif canonical.differs(payload, body):
            summary.unchanged -= 1
            repaired += 1
            log.warning(
                "verify.edited",
                key=key,
                remote_id=remote_id,
                fields=canonical.differs(payload, body),
            )
            resolved = Action(Kind.UPDATE, key, product, remote_id=remote_id)
        else:
            continue
        if resolved is not None:
            yield resolved
    if repaired:
        summary.notes.append(
            f"verify: {repaired} product(s) deleted or edited on the remote were put right"
        )


def second_look(
    client: Any, writer: Writer, mirror: Mirror, settings: Settings, summary: RunSummary
) -> None:
    """Creates whose response was lost, products deleted remotely: one fresh walk, then act."""
    results = writer.results
    todo = results.unknown + results.missing
    results.unknown, results.missing = [], []
    log.info("sync.second_look", products=len(todo))
    index = walk(client, mirror, settings, None)
    try:
        retries: list[Action] = []
        for product in todo:
            found = index.find(product.key)
            if len(found) == 1 and mirror.has_intent(product.key):
                remote_id, body = found[0]
                if canonical.differs(product.payload, body):
                    mirror.record_adopted(product, remote_id, in_step=False)
                    retries.append(Action(Kind.UPDATE, product.key, product, remote_id=remote_id))
                else:
                    mirror.record_created(product, remote_id)  # our lost POST did land
                    results.created += 1
                continue
            resolved = adopt_or_create(
                Action(Kind.CREATE, product.key, product), index, mirror, summary
            )
            if resolved is not None:
                retries.append(resolved)
        writer.run(retries)
    finally:
        index.close()
