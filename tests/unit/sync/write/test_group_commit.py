"""Group commit (issue 41): the writes that are ready together are journalled in one
transaction, their answers recorded in one, and a kill anywhere leaves each write known
or in doubt, never blind.

- From a second connection, at the moment each POST arrives, its intent is committed
  with this very payload (``tests.faults.FaultyRemote`` reads the state file), while the
  writer commits far fewer transactions than it makes writes.
- A kill before each step of a batch (each journal or outcome a batch carries counts as a
  step: the kill rolls the whole batch back) and a kill on either side of the server's
  commit of each create, then runs until clean: no key on the remote twice, none
  missing, no POST without its intent, none sent again before a walk that could show it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from skuferry import canonical, errors
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import Settings
from skuferry.models import Action, Kind, Product, RunOptions, RunSummary
from skuferry.state import statefile
from skuferry.state.mirror import Mirror
from skuferry.sync.engine import Adapters, run_once
from skuferry.sync.write.writer import BATCH, Writer
from tests.fakes import Crash, FakeClock, ListSource
from tests.faults import (
    FaultyRemote,
    WriteFault,
    crash_before_transaction,
    intents_never_reopened,
)

N = 12


def product(key: str) -> Product:
    payload = {"sku": key, "name": f"Lamp {key}", "price": "1.00"}
    return Product(key, payload, canonical.digest(payload), line=2)


@contextmanager
def counting_commits() -> Iterator[list[int]]:
    """Count the state file's transactions that begin (a write joining a batch does not)."""
    counted = [0]
    original = getattr(statefile, "transaction")  # noqa: B009 - the name the state file calls

    @contextmanager
    def counting(conn: Any, **kw: Any) -> Iterator[Any]:
        if not (kw.get("join") and conn.in_transaction):
            counted[0] += 1
        with original(conn, **kw) as inner:
            yield inner

    setattr(statefile, "transaction", counting)  # noqa: B010
    try:
        yield counted
    finally:
        setattr(statefile, "transaction", original)  # noqa: B010


def test_each_intent_of_a_batch_is_durable_before_its_post(tmp_path: Path) -> None:
    clock = FakeClock(tick=0.001)
    remote = FaultyRemote(state_path=tmp_path / "state.db", clock=clock)
    mirror = Mirror(tmp_path / "state.db")
    creates = [Action(Kind.CREATE, f"K{i:04d}", product(f"K{i:04d}")) for i in range(150)]
    try:
        writer = Writer(remote, mirror, run_id=None, update_method="patch", max_in_flight=4)
        with counting_commits() as commits:
            writer.run(creates)
        assert remote.violations == [], "each POST found its intent committed, this payload"
        assert remote.posts == 150 and writer.summary.created == 150
        assert mirror.counts_by_state() == {"synced": 150} and mirror.open_intents() == []
        # 150 intents in batches of BATCH, and the answers in batches: not 300 commits
        assert commits[0] <= 150 // 4, f"{commits[0]} transactions for 150 creates"
        assert commits[0] >= 150 // BATCH + 1
    finally:
        mirror.close()


# -- kills over batches, whole runs ---------------------------------------------------------


def make_settings(tmp_path: Path) -> Settings:
    return settings_from_dict(
        {
            "api": {
                "base_url": "http://127.0.0.1:9",
                "api_key": "k-test",
                "max_in_flight": 3,
                "list_lag_s": 2.0,
            },
            "source": {"type": "csv", "path": str(tmp_path / "unused.csv")},
            "mapping": {"key": "sku"},
            "state": {"path": str(tmp_path / "state.db")},
        }
    )


def catalog() -> list[dict[str, Any]]:
    return [{"sku": f"K{i:04d}", "name": f"Lamp {i}", "price": "1.00"} for i in range(N)]


def sync(settings: Settings, remote: FaultyRemote, clock: FakeClock) -> RunSummary:
    adapters = Adapters(source=ListSource(catalog()), client=remote, clock=clock)
    return run_once(settings, RunOptions(), adapters=adapters)


def until_clean(settings: Settings, remote: FaultyRemote, clock: FakeClock) -> None:
    """Runs as the schedule would make them, a minute apart, until one exits 0."""
    for _ in range(4):
        clock.now += 60.0
        if sync(settings, remote, clock).exit_code == 0:
            return
    pytest.fail("no clean run after the kill")


def assert_each_once(remote: FaultyRemote) -> None:
    counts = Counter(remote.keys())
    assert [k for k, n in counts.items() if n > 1] == [], "a key twice on the remote"
    assert sorted(counts) == [r["sku"] for r in catalog()], "a product lost"
    assert remote.violations == [], remote.violations


# A run of N creates into an empty remote takes 2N + 13 steps: the run's own and the
# walk's transactions, a batch of N intents (N steps, 24 inside batches in all) and
# their answers, and the run's end. One more step: a run the kill does not reach.
@pytest.mark.parametrize("step", range(1, 2 * N + 15))
def test_a_kill_before_any_step_of_a_batch_leaves_nothing_blind(tmp_path: Path, step: int) -> None:
    clock = FakeClock(tick=0.001)
    settings = make_settings(tmp_path)
    remote = FaultyRemote(state_path=tmp_path / "state.db", clock=clock, lag_s=1.0)
    fired: list[str] = []
    with crash_before_transaction(step, fired), intents_never_reopened():
        try:
            sync(settings, remote, clock)
        except Crash:
            assert fired, "only the kill ends the run"
    until_clean(settings, remote, clock)
    assert_each_once(remote)


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("nth", [0, 1, 5, N - 1])
def test_a_kill_around_the_servers_commit_of_any_create_of_a_batch(
    tmp_path: Path, when: str, nth: int
) -> None:
    """The process dies while a batch's POSTs are on the wire: the ones answered before
    and after it, not yet recorded, are in doubt with the rest, and looked up."""
    clock = FakeClock(tick=0.001)
    settings = make_settings(tmp_path)
    remote = FaultyRemote(state_path=tmp_path / "state.db", clock=clock, lag_s=1.0)
    remote.faults = [WriteFault(f"K{nth:04d}", "create", when, "crash")]  # type: ignore[arg-type]
    with intents_never_reopened(), pytest.raises(Crash):
        sync(settings, remote, clock)
    remote.disarm()
    until_clean(settings, remote, clock)
    assert_each_once(remote)


def test_lost_answers_in_a_batch_are_looked_up_never_sent_again(tmp_path: Path) -> None:
    clock = FakeClock(tick=0.001)
    settings = make_settings(tmp_path)
    remote = FaultyRemote(state_path=tmp_path / "state.db", clock=clock, lag_s=1.0)
    remote.faults = [
        WriteFault(f"K{i:04d}", "create", when, "unknown")  # type: ignore[arg-type]
        for i, when in ((1, "after"), (2, "before"), (7, "after"), (11, "before"))
    ]
    with intents_never_reopened():
        try:
            summary = sync(settings, remote, clock)
        except errors.ApiError:
            summary = None
    remote.disarm()
    if summary is None or summary.exit_code != 0:
        until_clean(settings, remote, clock)
    assert_each_once(remote)
