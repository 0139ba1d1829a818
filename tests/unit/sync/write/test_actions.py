"""Each kind of write, carried out by itself: its journal is durable before its request goes
out, and its outcome (answered, refused, unknown, not applied) is recorded as the exactly-once
rule says: an unknown outcome is left for a lookup or a read, never taken as done or undone.

Against the in-memory ``FakeRemote`` and a real state file; what the request sees committed
is read through a second connection at the moment the request arrives (``_Witness``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytest

from skuferry import canonical, errors
from skuferry.models import Action, Kind, MirrorRow, Product, RunSummary, State
from skuferry.state.mirror import Mirror
from skuferry.sync.write.actions import Archive, Create, Restore, Update, Write, WriteContext
from skuferry.sync.write.doubt import Doubts
from skuferry.sync.write.fields import Ownership
from skuferry.sync.write.gone import GonePolicy
from skuferry.sync.write.updates import Outcome, Updater
from tests.fakes import FakeClock, FakeRemote

GONE = GonePolicy(action="patch", patch={"status": "archived"}, restore={"status": "active"})
ARCHIVING = GONE.archiving


def product(key: str = "K1", price: str = "1.00") -> Product:
    payload = {"sku": key, "name": f"Product {key}", "price": price}
    return Product(key, payload, canonical.digest(payload), line=7)


class _Witness:
    """What another connection sees committed in the state file when a request arrives."""

    def __init__(self, path: Path, key: str) -> None:
        self.path, self.key = path, key
        self.rows: list[MirrorRow | None] = []
        self.intents: list[bool] = []
        self.sent: list[dict[str, Any] | None] = []

    def __call__(self, _kind: str, _payload: dict[str, Any]) -> None:
        other = Mirror(self.path, readonly=True)
        try:
            self.rows.append(other.rows([self.key]).get(self.key))
            self.intents.append(other.has_intent(self.key))
            self.sent.append(other.payload(self.key))
        finally:
            other.close()


def context(
    tmp_path: Path, remote: FakeRemote, *, method: Literal["patch", "put", "none"] = "patch"
) -> WriteContext:
    mirror = Mirror(tmp_path / "state.sqlite")
    way: Literal["patch", "put"] = "put" if method == "put" else "patch"
    updater = Updater(remote, method=way, ownership=Ownership(), policy=GONE)
    return WriteContext(
        client=remote,
        mirror=mirror,
        summary=RunSummary(),
        updater=updater,
        gone=GONE,
        doubts=Doubts(bound_s=0.0),
        clock=FakeClock(),
        run_id=None,
        method=method,
    )


def carry(write: Write[Any]) -> None:
    """What the writer does with one write, on one thread: send, request, record."""
    request = write.send()
    if request is None:
        return
    try:
        answer = request()
    except errors.SkuferryError as exc:
        write.failed(exc)
    else:
        write.applied(answer)


def synced(ctx: WriteContext, remote: FakeRemote, old: Product) -> str:
    """``old`` created earlier: on the remote and SYNCED in the mirror."""
    [remote_id] = remote.seed(dict(old.payload))
    ctx.mirror.record_created(old, remote_id)
    return remote_id


def archived(ctx: WriteContext, remote: FakeRemote, old: Product) -> str:
    """``old`` archived earlier, for sure (its [gone] patch answered)."""
    remote_id = synced(ctx, remote, old)
    remote.products[remote_id]["status"] = "archived"
    ctx.mirror.record_archived(old.key, {**old.payload})
    return remote_id


def row(ctx: WriteContext, key: str = "K1") -> MirrorRow:
    return ctx.mirror.rows([key])[key]


def updates_off(ctx: WriteContext) -> bool:
    return ctx.updates_off_reason is not None


def raising(exc: errors.SkuferryError) -> Any:
    def hook(_kind: str, _payload: dict[str, Any]) -> None:
        raise exc

    return hook


# -- which write carries which action ---------------------------------------------------


def test_each_planned_write_is_carried_by_its_kind_and_nothing_else_is_a_write(
    tmp_path: Path,
) -> None:
    ctx, p = context(tmp_path, FakeRemote()), product()
    kinds = {
        Kind.CREATE: Create,
        Kind.UPDATE: Update,
        Kind.RESTORE: Restore,
        Kind.ARCHIVE: Archive,
    }
    for kind, expected in kinds.items():
        assert type(Write.of(Action(kind, p.key, p, remote_id="r1"), ctx)) is expected
    with pytest.raises(RuntimeError, match="not a write"):
        Write.of(Action(Kind.UNCHANGED, p.key, p), ctx)
    with pytest.raises(RuntimeError, match="lookup, not a read"):
        Write.of(Action(Kind.CREATE, p.key, p), ctx).expected(None)


# -- create ---------------------------------------------------------------------------


def test_a_create_opens_its_intent_before_the_post_and_commits_the_id_after(
    tmp_path: Path,
) -> None:
    remote = FakeRemote()
    ctx, p = context(tmp_path, remote), product()
    remote.pre = witness = _Witness(tmp_path / "state.sqlite", p.key)
    create = Write.of(Action(Kind.CREATE, p.key, p), ctx)
    request = create.send()
    assert request is not None and remote.posts == 0, "send journals; the worker POSTs"
    assert ctx.mirror.has_intent(p.key)
    create.applied(request())
    assert witness.intents == [True], "the intent was durable before the POST went out"
    assert witness.rows[0] is not None and witness.rows[0].state is State.PENDING
    [remote_id] = remote.products
    done = row(ctx)
    assert (done.state, done.remote_id, done.digest) == (State.SYNCED, remote_id, p.digest)
    assert not ctx.mirror.has_intent(p.key)
    assert ctx.summary.created == 1
    assert remote_id in ctx.doubts.sent, "a create answered is timed: a witness for the list"


@pytest.mark.parametrize("landed", [True, False])
def test_a_create_whose_answer_is_lost_keeps_its_intent_for_a_lookup(
    tmp_path: Path, *, landed: bool
) -> None:
    remote = FakeRemote()
    ctx, p = context(tmp_path, remote), product()
    lost = raising(errors.OutcomeUnknown("connection reset after the request was sent"))
    if landed:
        remote.post = lost
    else:
        remote.pre = lost
    carry(Write.of(Action(Kind.CREATE, p.key, p), ctx))
    assert ctx.mirror.has_intent(p.key), "the POST may have landed: looked up, never re-sent"
    assert ctx.unknown == [p]
    assert p.key in ctx.doubts.lost
    assert row(ctx).state is State.FAILED and "outcome unknown" in (row(ctx).last_error or "")
    assert remote.posts == (1 if landed else 0), "exactly one POST, whatever came back"
    assert ctx.fatal is None and ctx.summary.created == 0


def test_a_bad_answer_to_a_create_is_in_doubt_and_ends_the_run(tmp_path: Path) -> None:
    remote = FakeRemote()
    ctx, p = context(tmp_path, remote), product()
    bad = errors.BadResponse("not JSON", status=200, content_type="text/html", head="<html>")
    remote.post = raising(bad)
    carry(Write.of(Action(Kind.CREATE, p.key, p), ctx))
    assert ctx.mirror.has_intent(p.key) and ctx.unknown == [p]
    assert ctx.fatal is bad


def test_a_create_provably_not_applied_closes_its_intent_and_fails(tmp_path: Path) -> None:
    remote = FakeRemote(allowed={"write": 0})  # every write is a 429
    ctx, p = context(tmp_path, remote), product()
    carry(Write.of(Action(Kind.CREATE, p.key, p), ctx))
    assert not ctx.mirror.has_intent(p.key), "a 429 is not applied: nothing to look up"
    assert row(ctx).state is State.FAILED
    assert ctx.unknown == [] and ctx.summary.failed == 1 and ctx.fatal is None


def test_a_refused_key_ends_the_run_and_marks_no_product(tmp_path: Path) -> None:
    remote = FakeRemote()
    ctx, p = context(tmp_path, remote), product()
    refused = errors.AuthError(401, "UNAUTHORIZED", "bad key")
    remote.pre = raising(refused)
    carry(Write.of(Action(Kind.CREATE, p.key, p), ctx))
    assert not ctx.mirror.has_intent(p.key)
    assert row(ctx).state is State.PENDING, "planned again next run, not failed"
    assert (ctx.summary.failed, ctx.fatal) == (0, refused)


def test_a_refused_create_is_rejected_until_its_data_change(tmp_path: Path) -> None:
    remote = FakeRemote()
    ctx = context(tmp_path, remote)
    p = Product("K1", {"sku": "K1", "name": ""}, canonical.digest({"sku": "K1", "name": ""}), 3)
    carry(Write.of(Action(Kind.CREATE, p.key, p), ctx))
    rejected = row(ctx)
    assert (rejected.state, rejected.digest) == (State.REJECTED, p.digest)
    assert not ctx.mirror.has_intent(p.key)
    assert ctx.summary.rejected == 1 and ctx.summary.failed == 0


# -- update ---------------------------------------------------------------------------


def test_an_update_journals_before_its_patch_and_records_success_only_from_the_answer(
    tmp_path: Path,
) -> None:
    remote = FakeRemote()
    ctx, old, new = context(tmp_path, remote), product(), product(price="2.00")
    remote_id = synced(ctx, remote, old)
    remote.pre = witness = _Witness(tmp_path / "state.sqlite", new.key)
    update = Write.of(Action(Kind.UPDATE, new.key, new, remote_id=remote_id), ctx)
    request = update.send()
    assert request is not None
    assert row(ctx).digest is None, "in flight: the digest the remote holds is unknown"
    assert ctx.summary.updated == 0
    update.applied(request())
    [seen] = witness.rows
    assert seen is not None and seen.digest is None, "the journal was durable before the PATCH"
    assert witness.sent[0] is not None and "price" not in witness.sent[0], "the price in doubt"
    done = row(ctx)
    assert (done.state, done.digest) == (State.SYNCED, new.digest)
    assert ctx.mirror.payload(new.key) == new.payload
    assert ctx.summary.updated == 1 and ctx.updates_confirmed
    assert remote.products[remote_id]["price"] == "2.00"


def test_an_update_whose_answer_is_lost_stays_journalled_for_a_read(tmp_path: Path) -> None:
    remote = FakeRemote()
    ctx, old, new = context(tmp_path, remote), product(), product(price="2.00")
    remote_id = synced(ctx, remote, old)
    remote.post = raising(errors.OutcomeUnknown("HTTP 502 after the request was sent"))
    action = Action(Kind.UPDATE, new.key, new, remote_id=remote_id)
    carry(Write.of(action, ctx))
    assert ctx.unsettled == [action], "read back in this run, not taken as done or undone"
    in_doubt = row(ctx)
    assert in_doubt.digest is None and in_doubt.state is State.SYNCED
    assert "price" not in (ctx.mirror.payload(new.key) or {})
    assert (ctx.summary.updated, ctx.summary.failed) == (0, 0)
    assert remote.requests["write"] == 1


def test_an_update_with_nothing_owned_changed_needs_no_request(tmp_path: Path) -> None:
    remote = FakeRemote()
    ctx, p = context(tmp_path, remote), product()
    remote_id = synced(ctx, remote, p)
    assert Write.of(Action(Kind.UPDATE, p.key, p, remote_id=remote_id), ctx).send() is None
    assert (remote.requests["write"], ctx.summary.unchanged) == (0, 1)
    assert row(ctx).digest == p.digest


def test_an_update_refused_is_rejected_under_its_digest(tmp_path: Path) -> None:
    remote = FakeRemote()
    ctx, old, new = context(tmp_path, remote), product(), product(price="2.00")
    remote_id = synced(ctx, remote, old)
    remote.pre = raising(errors.Rejected(422, "VALIDATION_ERROR", "price: too high"))
    carry(Write.of(Action(Kind.UPDATE, new.key, new, remote_id=remote_id), ctx))
    refused = row(ctx)
    assert (refused.state, refused.digest) == (State.REJECTED, new.digest)
    assert ctx.summary.rejected == 1 and ctx.unsettled == []


def test_an_update_the_server_lacks_turns_updates_off_as_drift(tmp_path: Path) -> None:
    remote = FakeRemote(updates="put")  # PATCH answers 405
    ctx = context(tmp_path, remote)
    first, second = product("K1"), product("K2")
    ids = [synced(ctx, remote, first), synced(ctx, remote, second)]
    for old, remote_id in zip((first, second), ids, strict=True):
        new = product(old.key, price="2.00")
        carry(Write.of(Action(Kind.UPDATE, new.key, new, remote_id=remote_id), ctx))
    assert remote.requests["write"] == 1, "the second one knew: no request"
    assert ctx.updates_off_reason is not None and "PATCH" in ctx.updates_off_reason
    assert {row(ctx, k).state for k in ("K1", "K2")} == {State.DRIFT}
    assert ctx.summary.drift == 2 and not ctx.updates_confirmed


def test_a_404_on_an_update_tells_a_deleted_product_from_a_missing_route(
    tmp_path: Path,
) -> None:
    remote = FakeRemote()
    ctx = context(tmp_path, remote)
    gone_old, kept_old = product("K1"), product("K2")
    gone_id, kept_id = synced(ctx, remote, gone_old), synced(ctx, remote, kept_old)
    del remote.products[gone_id]
    gone_new = product("K1", price="2.00")
    carry(Write.of(Action(Kind.UPDATE, "K1", gone_new, remote_id=gone_id), ctx))
    forgotten = row(ctx, "K1")
    assert (forgotten.state, forgotten.remote_id) == (State.PENDING, None)
    assert ctx.missing == [gone_new] and not updates_off(ctx), "one read told: deleted"
    remote.pre = raising(errors.NotFound(404, "NOT_FOUND", "no route"))  # the product is there
    kept_new = product("K2", price="2.00")
    carry(Write.of(Action(Kind.UPDATE, "K2", kept_new, remote_id=kept_id), ctx))
    assert row(ctx, "K2").state is State.DRIFT and updates_off(ctx), "the read found it"
    assert ctx.missing == [gone_new]


# -- restore --------------------------------------------------------------------------


def test_a_restore_stays_archived_in_doubt_until_its_answer_comes(tmp_path: Path) -> None:
    remote = FakeRemote()
    ctx, old = context(tmp_path, remote), product()
    remote_id = archived(ctx, remote, old)
    remote.pre = witness = _Witness(tmp_path / "state.sqlite", old.key)
    carry(Write.of(Action(Kind.RESTORE, old.key, old, remote_id=remote_id), ctx))
    [seen] = witness.rows
    assert seen is not None and (seen.state, seen.digest) == (State.ARCHIVED, ARCHIVING)
    assert row(ctx).state is State.SYNCED and ctx.summary.restored == 1
    assert remote.products[remote_id]["status"] == "active"


def test_a_restore_refused_or_failed_stays_archived(tmp_path: Path) -> None:
    remote = FakeRemote()
    ctx, old, new = context(tmp_path, remote), product(), product(price="2.00")
    remote_id = archived(ctx, remote, old)
    action = Action(Kind.RESTORE, new.key, new, remote_id=remote_id)
    remote.pre = raising(errors.Rejected(422, "VALIDATION_ERROR", "no"))
    carry(Write.of(action, ctx))
    assert (row(ctx).state, row(ctx).digest) == (State.ARCHIVED, new.digest)
    remote.pre = raising(errors.ServerError(503, "UNAVAILABLE", "later"))
    carry(Write.of(action, ctx))
    assert row(ctx).state is State.ARCHIVED and ctx.summary.failed == 1


# -- archive --------------------------------------------------------------------------


def test_an_archive_journals_in_doubt_before_its_patch(tmp_path: Path) -> None:
    remote = FakeRemote()
    ctx, old = context(tmp_path, remote), product()
    remote_id = synced(ctx, remote, old)
    remote.pre = witness = _Witness(tmp_path / "state.sqlite", old.key)
    carry(Write.of(Action(Kind.ARCHIVE, old.key, remote_id=remote_id), ctx))
    [seen] = witness.rows
    assert seen is not None and (seen.state, seen.digest) == (State.ARCHIVED, ARCHIVING)
    done = row(ctx)
    assert (done.state, done.digest) == (State.ARCHIVED, None), "archived for sure"
    assert ctx.summary.archived == 1 and remote.products[remote_id]["status"] == "archived"


def test_an_archive_whose_answer_is_lost_stays_in_doubt_for_a_read(tmp_path: Path) -> None:
    remote = FakeRemote()
    ctx, old = context(tmp_path, remote), product()
    remote_id = synced(ctx, remote, old)
    remote.post = raising(errors.OutcomeUnknown("reset"))
    action = Action(Kind.ARCHIVE, old.key, remote_id=remote_id)
    carry(Write.of(action, ctx))
    assert ctx.unsettled == [action]
    assert (row(ctx).state, row(ctx).digest) == (State.ARCHIVED, ARCHIVING)
    assert ctx.summary.archived == ctx.summary.failed == 0


def test_an_archive_refused_is_rejected_under_the_patch(tmp_path: Path) -> None:
    remote = FakeRemote()
    ctx, old = context(tmp_path, remote), product()
    remote_id = synced(ctx, remote, old)
    remote.pre = raising(errors.Rejected(422, "VALIDATION_ERROR", "status: unknown value"))
    carry(Write.of(Action(Kind.ARCHIVE, old.key, remote_id=remote_id), ctx))
    assert (row(ctx).state, row(ctx).digest) == (State.REJECTED, ARCHIVING)
    assert ctx.summary.rejected == 1


def test_an_archive_not_applied_fails_but_a_bad_answer_leaves_it_in_doubt(
    tmp_path: Path,
) -> None:
    remote = FakeRemote()
    ctx = context(tmp_path, remote)
    limited, garbled = product("K1"), product("K2")
    ids = [synced(ctx, remote, limited), synced(ctx, remote, garbled)]
    remote.pre = raising(errors.RateLimited(429, "RATE_LIMITED", "later", retry_after=60.0))
    carry(Write.of(Action(Kind.ARCHIVE, "K1", remote_id=ids[0]), ctx))
    assert row(ctx, "K1").state is State.FAILED, "a 429 was not applied: planned again"
    bad = errors.BadResponse("not JSON", status=200, content_type="text/html", head="<html>")
    remote.pre, remote.post = None, raising(bad)
    carry(Write.of(Action(Kind.ARCHIVE, "K2", remote_id=ids[1]), ctx))
    in_doubt = row(ctx, "K2")
    assert (in_doubt.state, in_doubt.digest) == (State.ARCHIVED, ARCHIVING), "may have landed"
    assert ctx.summary.failed == 2 and ctx.unsettled == []


def test_with_updates_off_an_archive_in_doubt_is_read_and_one_live_is_drift(
    tmp_path: Path,
) -> None:
    remote = FakeRemote()
    ctx = context(tmp_path, remote, method="none")
    doubtful, live = product("K1"), product("K2")
    doubtful_id, live_id = synced(ctx, remote, doubtful), synced(ctx, remote, live)
    ctx.mirror.record_archive_sent("K1", patch_digest=ARCHIVING or "")  # an earlier run's
    in_doubt = Action(Kind.ARCHIVE, "K1", remote_id=doubtful_id)
    assert Write.of(in_doubt, ctx).send() is None
    assert Write.of(Action(Kind.ARCHIVE, "K2", remote_id=live_id), ctx).send() is None
    assert ctx.unsettled == [in_doubt]
    assert row(ctx, "K2").state is State.DRIFT and ctx.summary.drift == 1
    assert remote.requests["write"] == 0


# -- settling a lost answer by a read ---------------------------------------------------


def test_a_read_that_finds_the_write_applied_commits_it(tmp_path: Path) -> None:
    remote = FakeRemote()
    ctx, old, new = context(tmp_path, remote), product(), product(price="2.00")
    remote_id = synced(ctx, remote, old)
    update = Write.of(Action(Kind.UPDATE, new.key, new, remote_id=remote_id), ctx)
    update.send()  # journalled, the answer lost
    sent = ctx.mirror.payload(new.key)
    update.found_applied(sent, update.expected(sent))
    assert (row(ctx).state, row(ctx).digest) == (State.SYNCED, new.digest)
    assert ctx.summary.updated == 1
    archive = Write.of(Action(Kind.ARCHIVE, new.key, remote_id=remote_id), ctx)
    archive.send()
    sent = ctx.mirror.payload(new.key)
    archive.found_applied(sent, archive.expected(sent))
    assert (row(ctx).state, row(ctx).digest) == (State.ARCHIVED, None)
    assert ctx.mirror.payload(new.key) == {**new.payload}, "the patch's fields the source gives"


def test_a_read_that_finds_the_write_missing_records_what_the_remote_holds(
    tmp_path: Path,
) -> None:
    remote = FakeRemote()
    ctx, old, new = context(tmp_path, remote), product(), product(price="2.00")
    remote_id = synced(ctx, remote, old)
    remote.products[remote_id]["price"] = "1.50"  # staff's edit, not ours
    update = Write.of(Action(Kind.UPDATE, new.key, new, remote_id=remote_id), ctx)
    update.send()
    sent = ctx.mirror.payload(new.key)
    update.found_unapplied(remote.products[remote_id], sent, update.expected(sent))
    assert ctx.mirror.payload(new.key) == {**old.payload, "price": "1.50"}
    archive = Write.of(Action(Kind.ARCHIVE, new.key, remote_id=remote_id), ctx)
    archive.send()
    archive.found_unapplied(remote.products[remote_id], sent, archive.expected(sent))
    assert row(ctx).state is State.DRIFT, "not archived: no longer in doubt"


def test_what_no_read_settled_is_sent_again_next_run(tmp_path: Path) -> None:
    remote = FakeRemote()
    ctx = context(tmp_path, remote)
    updated, restored, archived_ = product("K1"), product("K2"), product("K3")
    ids = [synced(ctx, remote, updated), archived(ctx, remote, restored)]
    ids.append(synced(ctx, remote, archived_))
    writes = [
        Write.of(Action(Kind.UPDATE, "K1", product("K1", "2.00"), remote_id=ids[0]), ctx),
        Write.of(Action(Kind.RESTORE, "K2", restored, remote_id=ids[1]), ctx),
        Write.of(Action(Kind.ARCHIVE, "K3", remote_id=ids[2]), ctx),
    ]
    for write in writes:
        write.send()
        write.given_up("outcome unknown: lost")
    assert row(ctx, "K1").state is State.FAILED and row(ctx, "K1").digest is None
    assert row(ctx, "K2").state is State.ARCHIVED
    assert (row(ctx, "K3").state, row(ctx, "K3").digest) == (State.ARCHIVED, ARCHIVING)


def test_an_outcome_without_a_write_counts_in_step_not_updated(tmp_path: Path) -> None:
    remote = FakeRemote()
    ctx, p = context(tmp_path, remote), product()
    remote_id = synced(ctx, remote, p)
    update = Write.of(Action(Kind.UPDATE, p.key, p, remote_id=remote_id), ctx)
    update.applied(Outcome(dict(p.payload), wrote=False, adopted=True))
    assert (ctx.summary.unchanged, ctx.summary.updated, ctx.summary.adopted) == (1, 0, 1)
    assert not ctx.updates_confirmed, "a read alone does not prove the method"
