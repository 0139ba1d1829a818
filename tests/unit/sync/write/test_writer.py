"""The writer runs writes in its bounded pool: the first PATCH/PUT alone, every write done
once, and what is in flight committed even when the run stops.

What each write sends and records is the writes' own (``test_actions.py``); these tests
hold the pool to its part.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from skuferry import canonical
from skuferry.models import Action, Kind, Product, State
from skuferry.state.mirror import Mirror
from skuferry.sync.write.writer import Writer
from tests.fakes import FakeRemote


def product(key: str, price: str = "1.00") -> Product:
    payload = {"sku": key, "name": f"Product {key}", "price": price}
    return Product(key, payload, canonical.digest(payload), line=2)


def _synced(mirror: Mirror, remote: FakeRemote, n: int) -> list[Action]:
    """``n`` products on the remote and SYNCED; their updates to a new price."""
    updates = []
    for i in range(n):
        old = product(f"K{i}")
        [remote_id] = remote.seed(dict(old.payload))
        mirror.record_created(old, remote_id)
        new = product(old.key, price="2.00")
        updates.append(Action(Kind.UPDATE, new.key, new, remote_id=remote_id))
    return updates


def test_the_first_update_goes_out_alone_so_a_missing_method_costs_one_request(
    tmp_path: Path,
) -> None:
    remote, mirror = FakeRemote(updates="put"), Mirror(tmp_path / "state.sqlite")
    updates = _synced(mirror, remote, 10)
    done = []
    writer = Writer(
        remote,
        mirror,
        run_id=None,
        update_method="patch",
        max_in_flight=4,
        on_done=lambda: done.append(1),
    )
    writer.run(updates)
    assert remote.requests["write"] == 1, "one 405 learns it, not a pool-full of them"
    assert writer.summary.drift == 10 and len(done) == 10
    assert set(mirror.counts_by_state()) == {"drift"}


def test_every_write_is_done_once_in_a_full_pool(tmp_path: Path) -> None:
    remote, mirror = FakeRemote(), Mirror(tmp_path / "state.sqlite")
    updates = _synced(mirror, remote, 12)
    creates = [Action(Kind.CREATE, f"N{i}", product(f"N{i}")) for i in range(12)]
    done = []
    writer = Writer(
        remote,
        mirror,
        run_id=None,
        update_method="patch",
        max_in_flight=3,
        on_done=lambda: done.append(1),
    )
    writer.run([*updates, *creates])
    assert (writer.summary.updated, writer.summary.created) == (12, 12)
    assert remote.posts == 12 and remote.requests["write"] == 24
    assert len(done) == 24 and mirror.counts_by_state() == {"synced": 24}
    assert mirror.open_intents() == []


def test_a_stop_sends_nothing_more_but_commits_what_is_in_flight(tmp_path: Path) -> None:
    remote, mirror = FakeRemote(), Mirror(tmp_path / "state.sqlite")
    stop = threading.Event()
    posted = threading.Event()

    def stop_on_first(kind: str, _payload: dict[str, Any]) -> None:
        if kind == "create" and not posted.is_set():
            posted.set()
            stop.set()  # the run is asked to stop while this POST is on the wire

    remote.post = stop_on_first
    creates = [Action(Kind.CREATE, f"N{i}", product(f"N{i}")) for i in range(20)]
    writer = Writer(remote, mirror, run_id=None, update_method="patch", max_in_flight=2, stop=stop)
    writer.run(creates)
    sent = remote.posts
    assert 1 <= sent < 20, "the stop ended the sends"
    assert writer.summary.created == sent, "every POST that went out was committed"
    counts = mirror.counts_by_state()
    assert counts.pop("synced") == sent
    # creates journalled in the batch whose POSTs never left: planned again, no intent open
    assert set(counts) <= {"pending"}
    assert mirror.open_intents() == [] and writer.unknown == []
    assert mirror.rows(["N0"])["N0"].state is State.SYNCED
