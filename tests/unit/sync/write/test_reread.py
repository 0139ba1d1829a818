"""A run that hears its source (sync/write/reread.py): an export replaced mid-run.

The engine against in-memory fakes. A run drains a backlog of name updates, one
write at a time; after a few of them the export is replaced and the daemon's word
arrives (``UrgentInbox.source_changed``). The products whose urgent field changed
go next, in the same run; other changes wait; a torn or empty export is ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from skuferry import errors
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import Settings
from skuferry.models import BadRecord, RawRecord
from skuferry.state.mirror import Mirror
from skuferry.sync.engine import Adapters, run_once
from skuferry.sync.write.lanes import UrgentInbox
from tests.fakes import FakeRemote, ListSource

N = 30


def make_settings(tmp_path: Path) -> Settings:
    return settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k-test", "max_in_flight": 1},
            "source": {"type": "csv", "path": str(tmp_path / "unused.csv")},
            "mapping": {"key": "sku", "urgent": ["price"]},
            "safety": {"max_change_ratio": 1.0},
            "state": {"path": str(tmp_path / "state.db")},
        }
    )


def rows(text: str, prices: dict[int, str] | None = None) -> list[dict[str, Any]]:
    prices = prices or {}
    return [
        {"sku": f"SKU-{i:04d}", "name": f"{text} {i}", "price": prices.get(i, "1.00")}
        for i in range(N)
    ]


class Export(ListSource):
    """The export file: ``rows`` replaced whole, or ``torn`` (the reader's SourceError after
    a few records, as a cut CSV or JSONL gives)."""

    torn = False

    def records(self) -> Iterator[RawRecord | BadRecord]:
        for n, record in enumerate(super().records()):
            if self.torn and n == 3:
                raise errors.SourceError("catalog.csv: the last line has no newline (torn)")
            yield record


class Remote(FakeRemote):
    """Records each update as (sku, fields sent)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(updates="patch", **kw)
        self.log: list[tuple[str, dict[str, Any]]] = []
        self.on_update: Callable[[int], None] = lambda _n: None

    def update_product(
        self, product_id: str, payload: dict[str, Any], *, method: Any
    ) -> dict[str, Any]:
        found = super().update_product(product_id, payload, method=method)
        self.log.append((str(found["sku"]), dict(payload)))
        self.on_update(len(self.log))
        return found


def synced(tmp_path: Path) -> tuple[Settings, Remote, Export]:
    settings, remote, export = make_settings(tmp_path), Remote(), Export(rows("First"))
    first = run_once(settings, adapters=Adapters(source=export, client=remote))
    assert first.created == N
    export.rows = rows("Second")  # the backlog: every name changed
    return settings, remote, export


def run_with_replace(
    settings: Settings, remote: Remote, export: Export, replace: Callable[[], None], at: int = 5
) -> Any:
    inbox = UrgentInbox()

    def on_update(n: int) -> None:
        if n == at:
            replace()
            inbox.source_changed()  # the daemon's watch: the file settled in a new version

    remote.on_update = on_update
    return run_once(settings, adapters=Adapters(source=export, client=remote, urgent=inbox))


def test_a_replaced_export_sends_its_changed_prices_next_in_the_same_run(tmp_path: Path):
    settings, remote, export = synced(tmp_path)

    def replace() -> None:  # prices of two products late in the backlog; a name early
        export.rows = rows("Second", prices={25: "9.99", 29: "8.88"})
        export.rows[1]["name"] = "Third 1"

    with capture_logs() as logs:
        summary = run_with_replace(settings, remote, export, replace)
    order = [sku for sku, _ in remote.log]
    # the next writes after the replace are the two price changes, each once
    assert order[5:7] == ["SKU-0025", "SKU-0029"]
    assert order.count("SKU-0025") == 1 and order.count("SKU-0029") == 1
    assert remote.log[5][1] == {"name": "Second 25", "price": "9.99"}, "read from the new export"
    assert len(order) == N and summary.updated == N, "the backlog whole, in its own order"
    assert [s for s in order if s not in ("SKU-0025", "SKU-0029")] == [
        f"SKU-{i:04d}" for i in range(N) if i not in (25, 29)
    ]
    assert remote.by_key("SKU-0001")[0]["name"] == "Second 1", "a non-urgent change waits"
    mirror = Mirror(settings.state.path)
    try:  # the journal: what was sent is what the mirror holds
        assert (mirror.payload("SKU-0029") or {})["price"] == "8.88"
    finally:
        mirror.close()
    found = [e for e in logs if e["event"] == "sync.reread.changed"]
    assert found and found[0]["urgent"] == 2


def test_a_second_replace_with_the_same_prices_adds_nothing(tmp_path: Path):
    settings, remote, export = synced(tmp_path)
    inbox = UrgentInbox()

    def on_update(n: int) -> None:
        if n in (5, 10):
            export.rows = rows("Second", prices={25: "9.99"})
            inbox.source_changed()

    remote.on_update = on_update
    with capture_logs() as logs:
        run_once(settings, adapters=Adapters(source=export, client=remote, urgent=inbox))
    assert [sku for sku, _ in remote.log].count("SKU-0025") == 1
    looks = [e["urgent"] for e in logs if e["event"] == "sync.reread.changed"]
    assert looks == [1, 0], "the second look compares with what the lane sent"


@pytest.mark.parametrize("how", ["torn", "empty"])
def test_a_torn_or_empty_export_mid_run_is_ignored(tmp_path: Path, how: str):
    settings, remote, export = synced(tmp_path)

    def replace() -> None:
        if how == "torn":
            export.torn = True
        else:
            export.rows = []

    with capture_logs() as logs:
        summary = run_with_replace(settings, remote, export, replace)
    assert [sku for sku, _ in remote.log] == [f"SKU-{i:04d}" for i in range(N)]
    assert summary.updated == N and summary.exit_code == 0
    assert summary.archived == 0, "nothing decided from absence"
    ignored = [e for e in logs if e["event"] == "sync.reread.ignored"]
    assert len(ignored) == 1


def test_without_urgent_fields_or_outside_the_daemon_nothing_is_read_again(tmp_path: Path):
    settings, remote, export = synced(tmp_path)
    reads = 0
    original = export.records

    def counted() -> Iterator[RawRecord | BadRecord]:
        nonlocal reads
        reads += 1
        return original()

    export.records = counted  # type: ignore[method-assign]

    def replace() -> None:
        export.rows = rows("Second", prices={25: "9.99"})

    # no inbox: a run from cron or the shell does not hear the source
    remote.on_update = lambda n: replace() if n == 5 else None
    run_once(settings, adapters=Adapters(source=export, client=remote))
    assert reads == 1
    assert [sku for sku, _ in remote.log].index("SKU-0025") == 25
