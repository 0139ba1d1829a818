"""Lost update answers settled in the same run, 401/403 and stops that mark nothing, the auth check.

Against the in-memory ``FakeRemote``: its ``pre`` hook fails a write before it is
stored, ``post`` after (the answer lost once the product changed).
"""

from __future__ import annotations

import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from skuferry import errors
from skuferry.models import State
from skuferry.state.mirror import Mirror
from skuferry.sync.write import auth_check
from skuferry.sync.write.settle import differing
from tests.fakes import Crash, FakeRemote
from tests.unit.sync.test_engine import catalog, make_settings, sync


def _lose(keys: set[str], *, times: int = 1) -> Any:
    """A hook that raises OutcomeUnknown for updates of ``keys``, ``times`` times each."""
    left = dict.fromkeys(keys, times)

    def hook(kind: str, payload: dict[str, Any]) -> None:
        key = payload.get("sku")
        if kind == "update" and key is None:
            key = next((k for k, n in left.items() if n > 0), None)  # a PATCH omits the sku
        if kind == "update" and key in left and left[key] > 0:
            left[key] -= 1
            raise errors.OutcomeUnknown("connection reset after the request was sent")

    return hook


def _states(settings: Any) -> dict[str, int]:
    mirror = Mirror(settings.state.path)
    try:
        return mirror.counts_by_state()
    finally:
        mirror.close()


def _prices(remote: FakeRemote) -> dict[str, str]:
    return {p["sku"]: p["price"] for p in remote.products.values()}


def _changed_prices(n: int) -> list[dict[str, Any]]:
    return catalog(n, changed={f"SKU-{i:04d}": "2.00" for i in range(n)})


def _patches_losing(remote: FakeRemote, lost: int, *, after_commit: bool) -> list[str]:
    """Lose the answer of the first ``lost`` PATCHes (after or before the change is stored)."""
    seen: list[str] = []
    budget = {"left": lost}

    def hook(kind: str, payload: dict[str, Any]) -> None:
        if kind != "update":
            return
        seen.append(str(payload))
        if budget["left"] > 0:
            budget["left"] -= 1
            raise errors.OutcomeUnknown("HTTP 500 after commit; the write may have been applied")

    if after_commit:
        remote.post = hook
    else:
        remote.pre = hook
    return seen


@pytest.mark.parametrize("method", ["patch", "put"])
@pytest.mark.parametrize("after_commit", [True, False])
def test_lost_patch_answers_are_settled_in_the_same_run(
    tmp_path: Path, *, after_commit: bool, method: str
) -> None:
    settings, remote = make_settings(tmp_path, api={"update_method": method}), FakeRemote()
    sync(settings, remote, catalog(10))
    reads_before = remote.requests["read"]
    sent = _patches_losing(remote, 4, after_commit=after_commit)
    summary = sync(settings, remote, _changed_prices(10))
    assert (summary.failed, summary.updated) == (0, 10), summary.problems
    assert summary.exit_code == 0
    assert set(_prices(remote).values()) == {"2.00"}
    assert _states(settings) == {"synced": 10}
    put_reads = 14 if method == "put" and not after_commit else 10 if method == "put" else 0
    assert remote.requests["read"] - reads_before == 4 + put_reads, "one read per lost answer"
    # landed: read back and committed, nothing resent; not landed: sent once more
    assert len(sent) == (10 if after_commit else 14)


def test_an_update_found_applied_is_committed_with_what_was_sent(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path), FakeRemote()
    sync(settings, remote, catalog(3))
    _patches_losing(remote, 3, after_commit=True)
    sync(settings, remote, _changed_prices(3))
    remote.post = None
    writes = remote.requests["write"]
    again = sync(settings, remote, _changed_prices(3))
    assert (again.unchanged, remote.requests["write"]) == (3, writes), "nothing left in doubt"


def test_a_product_stays_failed_only_while_the_api_keeps_failing(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path, api={"max_retries": 2}), FakeRemote()
    sync(settings, remote, catalog(5))
    remote.pre = _lose({"SKU-0001"}, times=100)  # never applied, every answer lost
    summary = sync(settings, remote, catalog(5, changed={"SKU-0001": "9.99"}))
    assert summary.failed == 1 and summary.exit_code == 1
    assert any("could not be confirmed" in p["reason"] for p in summary.problems)
    assert _states(settings).get("failed") == 1
    remote.pre = None
    healed = sync(settings, remote, catalog(5, changed={"SKU-0001": "9.99"}))
    assert (healed.failed, healed.updated) == (0, 1)
    assert _prices(remote)["SKU-0001"] == "9.99"


def test_a_lost_answer_then_a_crash_leaves_a_journal_the_next_run_trusts(tmp_path: Path) -> None:
    """The PATCH landed, the process died before committing it, and the source went back to
    the old price: the remote must not keep the new one."""
    settings, remote = make_settings(tmp_path), FakeRemote()
    sync(settings, remote, catalog(2))

    def crash(kind: str, payload: dict[str, Any]) -> None:
        if kind == "update":
            raise Crash("killed after the PATCH was stored")

    remote.post = crash
    with pytest.raises(Crash):
        sync(settings, remote, catalog(2, changed={"SKU-0000": "5.00"}))
    remote.post = None
    assert _prices(remote)["SKU-0000"] == "5.00"
    summary = sync(settings, remote, catalog(2))  # the source is back at 1.00
    assert summary.failed == 0
    assert _prices(remote)["SKU-0000"] == "1.00"


def test_a_lost_archive_answer_is_settled_in_the_same_run(tmp_path: Path) -> None:
    gone = {"action": "patch", "patch": {"status": "archived"}}
    settings, remote = make_settings(tmp_path, gone=gone), FakeRemote()
    sync(settings, remote, catalog(12))
    remote.post = _lose({"SKU-0011"})
    summary = sync(settings, remote, catalog(11))
    assert (summary.archived, summary.failed) == (1, 0), summary.problems
    assert remote.by_key("SKU-0011")[0]["status"] == "archived"
    assert _states(settings).get("archived") == 1


def test_a_lost_restore_answer_is_settled_in_the_same_run(tmp_path: Path) -> None:
    gone = {"action": "patch", "patch": {"status": "archived"}, "restore": {"status": "active"}}
    settings, remote = make_settings(tmp_path, gone=gone), FakeRemote()
    sync(settings, remote, catalog(12))
    sync(settings, remote, catalog(11))
    assert remote.by_key("SKU-0011")[0]["status"] == "archived"
    remote.post = _lose({"SKU-0011"})
    summary = sync(settings, remote, catalog(12))
    assert (summary.restored, summary.failed) == (1, 0), summary.problems
    assert remote.by_key("SKU-0011")[0]["status"] == "active"
    assert _states(settings) == {"synced": 12}


def test_a_restore_cut_short_by_a_crash_leaves_the_archive_in_doubt(tmp_path: Path) -> None:
    """The restore PATCH landed, the process died before committing it: the product is live
    on the CMS, so when it leaves the source again it must be archived again."""
    gone = {"action": "patch", "patch": {"status": "archived"}, "restore": {"status": "active"}}
    settings, remote = make_settings(tmp_path, gone=gone), FakeRemote()
    sync(settings, remote, catalog(3))
    sync(settings, remote, catalog(2))  # SKU-0002 archived

    def crash(kind: str, payload: dict[str, Any]) -> None:
        if kind == "update":
            raise Crash("killed after the restore PATCH was stored")

    remote.post = crash
    with pytest.raises(Crash):
        sync(settings, remote, catalog(3, changed={"SKU-0002": "3.00"}))
    remote.post = None
    assert remote.by_key("SKU-0002")[0]["status"] == "active"
    mirror = Mirror(settings.state.path)
    try:
        row = mirror.rows(["SKU-0002"])["SKU-0002"]
    finally:
        mirror.close()
    assert row.state is State.ARCHIVED and row.digest is not None, "archived in doubt"
    summary = sync(settings, remote, catalog(2))  # it leaves again
    assert (summary.archived, summary.failed) == (1, 0), summary.problems
    assert remote.by_key("SKU-0002")[0]["status"] == "archived"
    writes = remote.requests["write"]
    sync(settings, remote, catalog(2))  # archived for sure now
    assert remote.requests["write"] == writes


def test_a_401_on_an_update_ends_the_run_and_marks_no_product(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path), FakeRemote()
    sync(settings, remote, catalog(3))

    def refuse(kind: str, payload: dict[str, Any]) -> None:
        raise errors.AuthError(401, "UNAUTHORIZED", "invalid API key")

    remote.pre = refuse
    with pytest.raises(errors.AuthError):
        sync(settings, remote, _changed_prices(3))
    states = _states(settings)
    assert states.get("failed", 0) == 0 and states.get("rejected", 0) == 0, states
    remote.pre = None
    summary = sync(settings, remote, _changed_prices(3))
    assert (summary.updated, summary.failed) == (3, 0)


def test_a_stop_counts_nothing_unsent_as_failed(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path, api={"max_in_flight": 1}), FakeRemote()
    sync(settings, remote, catalog(6))
    stop = threading.Event()

    def stop_after_first(kind: str, payload: dict[str, Any]) -> None:
        if stop.is_set():  # as RemoteClient does: no new request once stopping
            raise errors.Interrupted("stop requested; no new API request started")
        stop.set()

    remote.pre = stop_after_first
    summary = sync(settings, remote, _changed_prices(6), stop=stop)
    assert summary.interrupted and summary.status == "interrupted"
    assert summary.as_json()["status"] == "interrupted"
    assert summary.failed == 0, summary.problems
    assert _states(settings).get("failed", 0) == 0
    remote.pre = None
    rest = sync(settings, remote, _changed_prices(6))
    assert rest.failed == 0 and set(_prices(remote).values()) == {"2.00"}


def test_differing_treats_null_and_absent_alike_and_numbers_by_value() -> None:
    wanted = {"price": Decimal("19.90"), "x": None, "y": None}
    assert differing({"price": 19.9, "x": None}, wanted) == []
    assert differing({"price": 1}, {"price": 2, "stock": 0}) == ["price", "stock"]


# -- the auth check --------------------------------------------------------------------


def test_auth_check_is_due_after_the_interval_and_never_with_zero() -> None:
    assert auth_check.due(None, 1000.0, minutes=60)
    assert not auth_check.due(1000.0 - 59 * 60, 1000.0, minutes=60)
    assert auth_check.due(1000.0 - 60 * 60, 1000.0, minutes=60)
    assert not auth_check.due(None, 1000.0, minutes=0)


def _age_contact(settings: Any, seconds: float) -> None:
    mirror = Mirror(settings.state.path)
    last = mirror.last_api_contact()
    assert last is not None, "the sync before recorded its contact with the API"
    mirror.record_api_contact(last - seconds)
    mirror.close()


def test_a_quiet_run_probes_once_when_the_api_was_not_contacted_for_the_interval(
    tmp_path: Path,
) -> None:
    settings, remote = make_settings(tmp_path, api={"auth_check_minutes": 5}), FakeRemote()
    rows = catalog(4)
    sync(settings, remote, rows)
    assert _sent(settings, remote, rows) == {"read": 0, "write": 0}, "contacted: no probe"
    _age_contact(settings, 5 * 60)
    assert _sent(settings, remote, rows) == {"read": 1, "write": 0}, "one cheap read"
    assert _sent(settings, remote, rows)["read"] == 0, "the probe counts as contact"


def _sent(settings: Any, remote: FakeRemote, rows: list[Any], **kw: Any) -> dict[str, int]:
    """The requests one run sent (the fake counts on across runs)."""
    before = dict(remote.requests)
    summary = sync(settings, remote, rows, **kw)
    assert summary.requests == remote.requests, "the run's summary counts what it sent"
    return {tier: n - before[tier] for tier, n in remote.requests.items()}


def test_a_run_that_wrote_does_not_probe(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path, api={"auth_check_minutes": 1}), FakeRemote()
    sync(settings, remote, catalog(4))
    _age_contact(settings, 3600)
    assert _sent(settings, remote, _changed_prices(4)) == {"read": 0, "write": 4}


def test_a_revoked_key_ends_a_quiet_run_with_exit_3_and_marks_nothing(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path, api={"auth_check_minutes": 1}), FakeRemote()
    rows = catalog(4)
    sync(settings, remote, rows)
    _age_contact(settings, 120)

    def revoked(**_: Any) -> Any:
        raise errors.AuthError(401, "UNAUTHORIZED", "invalid API key")

    remote.iter_pages = revoked  # type: ignore[method-assign]
    with pytest.raises(errors.AuthError) as caught:
        sync(settings, remote, rows)
    assert caught.value.exit_code == 3
    mirror = Mirror(settings.state.path)
    last = mirror.last_runs(1)[0]
    assert (last["status"], last["exit_code"]) == ("error", 3)
    assert mirror.counts_by_state() == {State.SYNCED.value: 4}
    mirror.close()


def test_auth_check_zero_never_probes_and_a_dry_run_never_probes(tmp_path: Path) -> None:
    settings, remote = make_settings(tmp_path, api={"auth_check_minutes": 0}), FakeRemote()
    rows = catalog(2)
    sync(settings, remote, rows)
    _age_contact(settings, 10**7)
    assert _sent(settings, remote, rows)["read"] == 0
    checking = make_settings(tmp_path, api={"auth_check_minutes": 1})
    before = dict(remote.requests)
    sync(checking, remote, rows, dry_run=True)
    assert remote.requests == before, "a dry run sends nothing, not even the check"


def _archive_cut_short(settings: Any, remote: FakeRemote, *, landed: bool) -> None:
    """SKU-0002 leaves the source; the process dies around its [gone] PATCH (after the
    remote stored it when ``landed``, before otherwise): its archive is left in doubt."""
    sync(settings, remote, catalog(3))

    def crash(kind: str, payload: dict[str, Any]) -> None:
        if kind == "update":
            raise Crash("killed around the [gone] PATCH")

    if landed:
        remote.post = crash
    else:
        remote.pre = crash
    with pytest.raises(Crash):
        sync(settings, remote, catalog(2))
    remote.pre = remote.post = None
    assert (remote.by_key("SKU-0002")[0].get("status") == "archived") is landed
    assert _row(settings, "SKU-0002").state is State.ARCHIVED, "archived in doubt"


def _row(settings: Any, key: str) -> Any:
    mirror = Mirror(settings.state.path)
    try:
        return mirror.rows([key])[key]
    finally:
        mirror.close()


GONE = {"action": "patch", "patch": {"status": "archived"}, "restore": {"status": "active"}}


@pytest.mark.parametrize("off", ["update_method = none", "the API answers 405"])
def test_an_archive_in_doubt_is_looked_up_when_updates_are_off(tmp_path: Path, off: str) -> None:
    """Updates off does not make a [gone] PATCH that may have landed into drift: one read
    tells. Taken for drift, a product back in the source unchanged would pass for in step
    while the CMS still holds it archived."""
    settings, remote = make_settings(tmp_path, gone=GONE), FakeRemote()
    _archive_cut_short(settings, remote, landed=True)
    if off == "the API answers 405":
        remote.updates = "none"
        run_with = settings
    else:
        run_with = make_settings(tmp_path, gone=GONE, api={"update_method": "none"})
    writes = remote.requests["write"]
    summary = sync(run_with, remote, catalog(2))
    assert (summary.archived, summary.drift, summary.failed) == (1, 0, 0), summary.problems
    assert remote.requests["write"] - writes == (1 if off == "the API answers 405" else 0)
    row = _row(settings, "SKU-0002")
    assert (row.state, row.digest) == (State.ARCHIVED, None), "archived for sure"
    remote.updates = "both"
    back = sync(settings, remote, catalog(3))  # it comes back, updates on
    assert back.restored == 1, back.as_json()
    assert remote.by_key("SKU-0002")[0]["status"] == "active"


def test_an_archive_in_doubt_that_never_landed_is_drift_when_updates_are_off(
    tmp_path: Path,
) -> None:
    settings, remote = make_settings(tmp_path, gone=GONE), FakeRemote()
    _archive_cut_short(settings, remote, landed=False)
    off = make_settings(tmp_path, gone=GONE, api={"update_method": "none"})
    writes, reads = remote.requests["write"], remote.requests["read"]
    summary = sync(off, remote, catalog(2))
    assert (summary.archived, summary.drift, summary.failed) == (0, 1, 0), summary.problems
    assert remote.requests["write"] == writes, "updates are off: nothing sent"
    assert remote.requests["read"] - reads == 1, "one read settles the doubt"
    assert _row(settings, "SKU-0002").state is State.DRIFT
    again = sync(off, remote, catalog(2))  # no doubt left: drift without a request
    assert (again.drift, remote.requests["read"] - reads) == (1, 1)
    assert sync(off, remote, catalog(3)).unchanged == 3  # back: the CMS holds it live
    assert remote.by_key("SKU-0002")[0].get("status") != "archived"
