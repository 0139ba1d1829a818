"""Priority lanes: the order of a run's writes, and keys that arrive mid-run."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from skuferry import canonical
from skuferry.models import Action, Kind, Product
from skuferry.remote import budget as budget_module
from skuferry.remote import priority
from skuferry.remote.budget import Budget
from skuferry.state.budgetbook import BudgetBook
from skuferry.state.mirror import Mirror
from skuferry.state.schema import open_state
from skuferry.sync.write import writer as writer_module
from skuferry.sync.write.lanes import (
    Arrivals,
    Lanes,
    TrackingWriter,
    UrgentInbox,
    changes_urgent,
    ordered,
)
from tests.fakes import FakeRemote


def prod(key: str, line: int, **fields: Any) -> Product:
    payload = {"sku": key, **fields}
    return Product(key=key, payload=payload, digest=canonical.digest(payload), line=line)


def update(key: str, line: int, **fields: Any) -> Action:
    return Action(Kind.UPDATE, key, prod(key, line, **fields), remote_id=f"r-{key}", line=line)


def create(key: str, line: int) -> Action:
    return Action(Kind.CREATE, key, prod(key, line, stock=1), line=line)


def _seeded(
    remote: FakeRemote, mirror: Mirror, keys: list[str]
) -> tuple[dict[str, str], Callable[..., Action]]:
    """``keys`` on the CMS and in the mirror as synced; (their remote ids, an update of
    one of them with the given fields)."""
    ids = dict(zip(keys, remote.seed(*({"sku": k, "name": k} for k in keys)), strict=True))
    for key, rid in ids.items():
        mirror.record_created(prod(key, 0, name=key), rid)

    def upd(key: str, **fields: Any) -> Action:
        return Action(Kind.UPDATE, key, prod(key, 1, **fields), remote_id=ids[key], line=1)

    return ids, upd


def test_an_update_is_urgent_when_it_changes_an_urgent_field() -> None:
    action = update("A", 1, stock=5, name="x")
    assert changes_urgent(action, {"sku": "A", "stock": 4, "name": "x"}, ["stock"])
    assert not changes_urgent(action, {"sku": "A", "stock": 5, "name": "y"}, ["stock"])
    assert changes_urgent(action, None, ["stock"]), "nothing known as sent: it may differ"
    assert not changes_urgent(action, {"stock": 4}, [])


def test_ordered_sends_urgent_updates_then_creates_then_the_rest(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "state.db")
    try:
        for key in ("U1", "U2", "D1", "D2"):
            mirror.record_created(prod(key, 0, stock=1, name="old"), f"r-{key}")
        store = mirror.plan_store()
        store.fill(
            [
                update("D1", 1, stock=1, name="new"),  # description only
                create("C1", 2),
                update("U1", 3, stock=9, name="old"),  # stock changed
                update("D2", 4, stock=1, name="new"),
                update("U2", 5, stock=7, name="new"),
                create("C2", 6),
            ]
        )
        urgent = [a.key for a in ordered(store, mirror, ["stock"])]
        plain = [a.key for a in ordered(store, mirror, [])]
        store.close()
    finally:
        mirror.close()
    assert urgent == ["U1", "U2", "C1", "C2", "D1", "D2"]
    assert plain == ["D1", "C1", "U1", "D2", "U2", "C2"], "without urgent: source order"


def test_keys_that_arrive_go_first_supersede_the_runs_own_and_wait_while_in_flight() -> None:
    inbox = UrgentInbox()
    flying = {"K3"}
    fetched: list[list[str]] = []

    def fetch(keys: list[str]) -> list[Action]:
        fetched.append(keys)
        return [update(k, 0, stock=99) for k in keys]

    own = [update(f"K{i}", i, name="n") for i in range(1, 6)]
    lanes = Lanes(own, take=inbox.take, fetch=fetch, in_flight=lambda k: k in flying)
    sent: list[tuple[str | None, Any]] = []
    for action in lanes:
        assert action.product is not None
        sent.append((action.key, action.product.payload.get("stock")))
        if action.key == "K1":
            inbox.put(["K4", "K3", "K4"])  # pushed while the run writes; K3 is in flight
        if action.key == "K4" and action.product.payload.get("stock") == 99:
            flying.clear()  # K3's answer came
    assert sent == [("K1", None), ("K4", 99), ("K2", None), ("K3", 99), ("K5", None)]
    assert fetched == [["K4"], ["K3"]], "each key read once, after its write in flight"
    assert lanes.leftover == [] and lanes.sent == 2


def test_what_the_lane_cannot_send_is_left_over_for_a_run_after() -> None:
    inbox = UrgentInbox()
    inbox.put(["NEW", "STUCK"])
    lanes = Lanes(
        [],
        take=inbox.take,
        fetch=lambda keys: [create(k, 0) for k in keys if k == "NEW"],
        in_flight=lambda k: k == "STUCK",
        can_send=lambda a: a.kind is not Kind.CREATE,
    )
    assert list(lanes) == []
    assert lanes.leftover == ["NEW"], "STUCK may still be answered while the writer drains"
    lanes.close()  # the writer is done
    assert sorted(lanes.leftover) == ["NEW", "STUCK"]


def test_arrivals_take_the_inbox_and_keys_other_processes_left_in_the_state(
    tmp_path: Path,
) -> None:
    mirror = Mirror(tmp_path / "state.db")
    try:
        inbox = UrgentInbox()
        inbox.put(["A", "B"])
        mirror.hand_keys(["C", "A"])
        now = [0.0]
        take = Arrivals(mirror, inbox, clock=lambda: now[0])
        assert take() == ["A", "B", "C"]
        assert mirror.handed_keys() == [], "taken: removed from the state file"
        mirror.hand_keys(["D"])
        assert take() == [], "the state file is polled at most every POLL_S"
        now[0] = 1.0
        assert take() == ["D"]
    finally:
        mirror.close()


def test_a_lane_update_goes_out_marked_urgent_while_every_worker_waits_for_budget(
    tmp_path: Path,
) -> None:
    """The pool's one worker holds a backlog write that waits (for budget, as the window
    makes it); a key arriving meanwhile is still sent, on a spare worker, marked urgent."""
    release = threading.Event()
    sent: list[tuple[str, bool]] = []

    def pre(kind: str, payload: dict[str, Any]) -> None:
        urgent = priority.is_urgent()
        sent.append((str(payload.get("name") or payload.get("stock")), urgent))
        if not urgent and payload.get("name") == "K2 new":
            assert release.wait(30), "the lane's write never went out"  # guards a hang only

    remote = FakeRemote(updates="patch", pre=pre)
    ids = dict(
        zip(
            ["K1", "K2", "K3", "K9"],
            remote.seed(*({"sku": k, "name": k} for k in ["K1", "K2", "K3", "K9"])),
            strict=True,
        )
    )
    mirror = Mirror(tmp_path / "state.db")
    try:
        for key, rid in ids.items():
            mirror.record_created(prod(key, 0, name=key), rid)

        def upd(key: str, **fields: Any) -> Action:
            return Action(Kind.UPDATE, key, prod(key, 1, **fields), remote_id=ids[key], line=1)

        inbox = UrgentInbox()
        writer = TrackingWriter(remote, mirror, run_id=None, update_method="patch", max_in_flight=1)

        def fetch(keys: list[str]) -> list[Action]:
            return [upd(k, name=k, stock=7) for k in keys]

        lanes = Lanes(
            [upd(k, name=f"{k} new") for k in ("K1", "K2", "K3")],
            take=inbox.take,
            fetch=fetch,
            in_flight=writer.in_flight,
        )
        writer.lanes = lanes

        def own() -> Iterator[Action]:
            for action in lanes:
                if action.key == "K3":  # K2 holds the only worker now: the key arrives
                    inbox.put(["K9"])
                yield action

        def watch() -> None:  # let K2 go once the lane's write is out
            while not any(name == "7" for name, _ in sent):
                time.sleep(0.01)
            release.set()

        threading.Thread(target=watch, daemon=True).start()
        writer.run(own())
    finally:
        mirror.close()
    assert ("7", True) in sent, "the lane's write, marked urgent"
    assert sent.index(("7", True)) < sent.index(("K3 new", False)), "before the backlog's next"
    assert [u for _, u in sent].count(True) == 1, "only the lane's write is urgent"
    assert remote.products[ids["K9"]]["stock"] == 7


def test_without_express_the_lane_waits_for_a_free_worker() -> None:
    lanes = Lanes(
        [],
        take=lambda: ["K"],
        fetch=lambda ks: [update(k, 0) for k in ks],
        in_flight=lambda _k: False,
        express=False,
    )
    assert lanes.express() == []


def test_a_changed_source_is_read_again_once_and_its_keys_join_the_arrivals(
    tmp_path: Path,
) -> None:
    mirror = Mirror(tmp_path / "state.db")
    try:
        inbox = UrgentInbox()
        reads: list[int] = []

        def reread() -> list[str]:
            reads.append(1)
            return ["P1"]

        take = Arrivals(mirror, inbox, reread=reread)
        assert take() == [] and reads == []
        inbox.source_changed()
        inbox.put(["H1"])
        assert take() == ["H1", "P1"]
        assert take() == [] and len(reads) == 1, "read again once per change"
    finally:
        mirror.close()


def test_a_key_whose_write_is_in_flight_hastens_that_write() -> None:
    hastened: list[str] = []
    flying = {"K"}
    lanes = Lanes(
        [],
        take=lambda: ["K"] if flying else [],
        fetch=lambda keys: [update(k, 0, stock=1) for k in keys],
        in_flight=lambda k: k in flying,
        hasten=hastened.append,
    )
    assert lanes.express() == []
    assert hastened == ["K"]


def test_the_writer_hastens_a_backlog_write_the_lane_waits_for(tmp_path: Path) -> None:
    """K1's backlog write waits (for budget); the lane wants K1: that very write turns
    urgent where it waits, then the lane's own write of K1 follows."""
    seen: list[tuple[str, bool]] = []

    def pre(kind: str, payload: dict[str, Any]) -> None:
        if payload.get("name") == "K1 new":
            deadline = time.monotonic() + 30  # guards a hang only
            while not priority.is_urgent() and time.monotonic() < deadline:
                time.sleep(0.01)
        seen.append((str(payload.get("name") or payload.get("stock")), priority.is_urgent()))

    remote = FakeRemote(updates="patch", pre=pre)
    keys = ["K0", "K1", "K2"]
    mirror = Mirror(tmp_path / "state.db")
    try:
        _ids, upd = _seeded(remote, mirror, keys)
        writer = TrackingWriter(remote, mirror, run_id=None, update_method="patch", max_in_flight=1)
        asked: list[str] = []

        def take() -> list[str]:
            if writer.in_flight("K1") and not asked:
                asked.append("K1")
                return ["K1"]
            return []

        lanes = Lanes(
            [upd(k, name=f"{k} new") for k in keys],
            take=take,
            fetch=lambda ks: [upd(k, name=f"{k} new", stock=5) for k in ks],
            in_flight=writer.in_flight,
            hasten=writer.hasten,
        )
        writer.lanes = lanes
        writer.run(lanes)
    finally:
        mirror.close()
    assert ("K1 new", True) in seen, "the backlog's write of K1, hastened"
    assert ("5", True) in seen, "then the lane's"
    assert ("K2 new", False) in seen


def test_the_runs_own_write_held_for_room_is_dropped_when_the_lane_sent_its_key(
    tmp_path: Path,
) -> None:
    """K3's backlog write is in the writer's hand, waiting for room, when K3 arrives: the
    lane sends K3 from the new data, and the older write is never sent after it."""
    release = threading.Event()
    sent: list[tuple[str, bool]] = []

    def pre(kind: str, payload: dict[str, Any]) -> None:
        sent.append((str(payload.get("name") or payload.get("stock")), priority.is_urgent()))
        if payload.get("name") == "K2 new":
            assert release.wait(30), "the lane's write never went out"  # guards a hang only

    remote = FakeRemote(updates="patch", pre=pre)
    keys = ["K1", "K2", "K3"]
    mirror = Mirror(tmp_path / "state.db")
    try:
        ids, upd = _seeded(remote, mirror, keys)
        inbox = UrgentInbox()
        writer = TrackingWriter(remote, mirror, run_id=None, update_method="patch", max_in_flight=1)
        lanes = Lanes(
            [upd(k, name=f"{k} new", stock=1) for k in keys],
            take=inbox.take,
            fetch=lambda ks: [upd(k, name=k, stock=7) for k in ks],
            in_flight=writer.in_flight,
        )
        writer.lanes = lanes

        def own() -> Iterator[Action]:
            for action in lanes:
                if (
                    action.key == "K3"
                    and action.product
                    and action.product.payload.get("stock") == 1
                ):
                    inbox.put(["K3"])  # while K3's own write waits in the writer's hand
                yield action

        def watch() -> None:
            while not any(name == "7" for name, _ in sent):
                time.sleep(0.01)
            release.set()

        threading.Thread(target=watch, daemon=True).start()
        writer.run(own())
    finally:
        mirror.close()
    assert ("7", True) in sent
    assert ("K3 new", False) not in sent, "the older write is dropped"
    assert remote.products[ids["K3"]]["stock"] == 7


def test_a_stop_reaches_writes_waiting_for_the_budget_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41: the pool's workers wait for the budget on their marks, with no clock
    looking for a stop four times a second. The writer wakes them when the run stops: with
    an hour's backstop, the run still ends, and nothing waiting was sent."""
    monkeypatch.setattr(budget_module, "STOP_LOOK_S", 3600.0)
    stop = threading.Event()
    mirror = Mirror(tmp_path / "state.db")
    with Budget(
        BudgetBook(lambda: open_state(tmp_path / "budget.db")),
        limits={"read": 300, "write": 60},
        urgent_share=0.0,
    ) as budget:
        for _ in range(60):  # the window is spent: every write waits most of a minute
            budget.acquire("write")
        waiting: list[float] = []
        budget.on_wait = lambda _key, seconds: waiting.append(seconds)

        def pre(_kind: str, _payload: dict[str, Any]) -> None:  # as the client paces a send
            budget.acquire("write", stop=stop)

        remote = FakeRemote(updates="patch", pre=pre)
        writer = TrackingWriter(
            remote, mirror, run_id=None, update_method="patch", max_in_flight=2, stop=stop
        )
        writer.lanes = Lanes(
            [create(f"K{i}", i) for i in range(5)],
            take=list,
            fetch=lambda _keys: [],
            in_flight=writer.in_flight,
        )
        run = threading.Thread(target=writer.run, args=(writer.lanes,))
        try:
            run.start()
            deadline = time.monotonic() + 30
            while len(waiting) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(waiting) >= 2, "both workers wait for the budget"
            stop.set()
            run.join(30)
            assert not run.is_alive(), "the run ends on the stop, not on the backstop"
        finally:
            stop.set()
            run.join(60)
            mirror.close()
    assert remote.products == {}, "nothing that waited was sent"


def test_a_key_put_in_the_inbox_rings_the_writer_with_no_poll_to_wait_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41: the daemon's hooks put keys in the inbox, which rings the writer: it sends
    the lane's update at once, although its pool is busy and its poll is an hour long
    (it used to look four times a second, in every run, for keys that rarely come)."""
    monkeypatch.setattr(writer_module, "EXPRESS_POLL_S", 3600.0)
    busy, release, waiting = threading.Event(), threading.Event(), threading.Event()
    real_wait = concurrent.futures.wait

    def wait(*args: Any, **kwargs: Any) -> Any:  # the loop waits on its requests now
        if kwargs.get("timeout") == 3600.0:
            waiting.set()
        return real_wait(*args, **kwargs)

    monkeypatch.setattr(writer_module, "wait", wait)
    sent: list[tuple[str, bool]] = []

    def pre(kind: str, payload: dict[str, Any]) -> None:
        sent.append((str(payload.get("name") or payload.get("stock")), priority.is_urgent()))
        if payload.get("name") == "K1 new":
            busy.set()
            assert release.wait(30), "the lane's write never went out"  # guards a hang only

    remote = FakeRemote(updates="patch", pre=pre)
    keys = ["K1", "K2", "K9"]
    mirror = Mirror(tmp_path / "state.db")
    try:
        ids, upd = _seeded(remote, mirror, keys)
        inbox = UrgentInbox()
        writer = TrackingWriter(remote, mirror, run_id=None, update_method="patch", max_in_flight=1)
        writer.updates_confirmed = True  # the method is known: no probe goes out alone
        writer.lanes = Lanes(
            [upd(k, name=f"{k} new") for k in ("K1", "K2")],
            take=Arrivals(mirror, inbox),
            fetch=lambda ks: [upd(k, name=k, stock=7) for k in ks],
            in_flight=writer.in_flight,
        )

        def hook() -> None:  # once K1 holds the only worker and the loop waits, K9
            assert busy.wait(30) and waiting.wait(30)
            inbox.put(["K9"])
            while ("7", True) not in sent and not release.is_set():
                time.sleep(0.01)
            release.set()

        threading.Thread(target=hook, daemon=True).start()
        with inbox.ringing(writer.ring):
            writer.run(writer.lanes)
    finally:
        release.set()
        mirror.close()
    assert ("7", True) in sent, "the lane's write went out while K1 still held the pool"
    assert sent.index(("7", True)) < sent.index(("K2 new", False))
    assert remote.products[ids["K9"]]["stock"] == 7
