"""The sandbox's model of a misbehaving product list (sandbox/listing.py, faults.py)."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from skuferry.errors import UsageError
from skuferry.sandbox.cli import _parse_faults
from skuferry.sandbox.faults import LIST_FAULT_KINDS, FaultPicker, Faults
from skuferry.sandbox.listing import list_page
from skuferry.sandbox.store import Collection


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def products(n: int, clock: Clock | None = None) -> Collection:
    store = Collection(prefix="p", key_field="sku", clock=clock or Clock())
    store.create_many("ws", [{"sku": f"K{i}"} for i in range(1, n + 1)])
    return store


def ids(items: list[dict[str, Any]]) -> list[str]:
    return [str(p["sku"]) for p in items]


@pytest.mark.parametrize(
    ("fault", "page", "shown", "total"),
    [
        (None, 2, ["K3", "K4"], 5),
        ("list_empty", 2, [], 5),
        ("list_short", 2, ["K3"], 5),
        ("list_repeated", 2, ["K1", "K2"], 5),
        ("list_shifted", 2, ["K4", "K5"], 4),  # K3 slips past the reader, one fewer counted
        ("list_pages_changed", 2, ["K3", "K4"], 7),  # one page more than the products fill
    ],
)
def test_each_list_fault_serves_its_page(
    fault: Any, page: int, shown: list[str], total: int
) -> None:
    items, counted, applied = list_page(products(5), "ws", page=page, limit=2, fault=fault)
    assert (ids(items), counted, applied) == (shown, total, fault)


def test_a_shift_by_a_delete_carries_on_to_the_later_pages_of_the_walk() -> None:
    store = products(6)
    first, _t, _f = list_page(store, "ws", page=1, limit=2)
    second, total, fault = list_page(store, "ws", page=2, limit=2, fault="list_shifted")
    third, total3, _f = list_page(store, "ws", page=3, limit=2, shifted=1)
    assert ids(first + second + third) == ["K1", "K2", "K4", "K5", "K6"], "K3 slipped past"
    assert (total, total3, fault) == (5, 5, "list_shifted"), "meta.pages stays 3: unseen"


def test_the_last_page_is_never_made_short() -> None:
    items, _total, applied = list_page(products(5), "ws", page=3, limit=2, fault="list_short")
    assert (ids(items), applied) == (["K5"], None)


def test_page_1_cannot_be_repeated() -> None:
    items, _total, applied = list_page(products(5), "ws", page=1, limit=2, fault="list_repeated")
    assert (ids(items), applied) == (["K1", "K2"], None)


def test_a_lagging_list_shows_products_created_long_enough_ago() -> None:
    clock = Clock()
    store = products(2, clock)
    clock.now = 103.0
    store.create("ws", {"sku": "K3"})
    items, total, _ = list_page(store, "ws", page=1, limit=10, created_by=clock.now - 2.0)
    assert (ids(items), total) == (["K1", "K2"], 2)
    clock.now = 105.0
    items, total, _ = list_page(store, "ws", page=1, limit=10, created_by=clock.now - 2.0)
    assert (ids(items), total) == (["K1", "K2", "K3"], 3)
    assert store.get("ws", "p_000003") is not None, "a GET by id sees it at once"


def test_list_faults_are_drawn_per_page_and_only_for_the_page_asked() -> None:
    picker = FaultPicker(Faults(list_empty=1.0, list_page=2), seed=1)
    assert [picker.pick_list(p) for p in (1, 2, 3)] == [None, "list_empty", None]
    mixed = FaultPicker(Faults(list_short=0.5, list_repeated=0.5), seed=7)
    drawn = {mixed.pick_list(2) for _ in range(50)}
    assert drawn == {"list_short", "list_repeated"}
    assert FaultPicker(Faults(), seed=1).pick_list(2) is None


def test_list_faults_are_checked_and_set_like_the_others() -> None:
    with pytest.raises(UsageError, match="list fault probabilities add up to more than 1"):
        Faults(list_empty=0.6, list_short=0.6)
    with pytest.raises(UsageError, match="must not be negative"):
        Faults(list_lag_s=-1)
    faults = Faults.from_json({"list_shifted": 0.02, "list_lag_s": "2", "list_page": 2})
    assert (faults.list_shifted, faults.list_lag_s, faults.list_page) == (0.02, 2.0, 2)
    assert set(LIST_FAULT_KINDS) <= set(faults.as_json())


def test_the_sandbox_command_takes_list_faults() -> None:
    faults = _parse_faults(("list_empty=0.02", "reset=0.1"), slow_s=5.0, list_lag_s=2.0)
    assert (faults.list_empty, faults.reset, faults.list_lag_s) == (0.02, 0.1, 2.0)
    from skuferry.sandbox.cli import sandbox_command

    shown = CliRunner().invoke(sandbox_command, ["--help"]).output
    assert "--list-lag" in shown and "list_pages_changed" in shown


def test_the_api_carries_a_shift_through_the_walk_and_a_new_walk_starts_clean() -> None:
    from skuferry.sandbox.api import Api, match
    from skuferry.sandbox.config import SandboxConfig

    api = Api(SandboxConfig(faults=Faults(list_shifted=1.0, list_page=2)))
    api.products.create_many("default", [{"sku": f"K{i}", "name": "x"} for i in range(1, 7)])

    def walk() -> list[str]:
        seen: list[str] = []
        for page in (1, 2, 3):
            query = {"page": [str(page)], "limit": ["2"]}
            reply = api.dispatch("GET", match("/api/v1/products"), query, b"", "default")
            seen += ids(reply.body["data"])
            assert reply.body["meta"]["pages"] == 3
        return seen

    assert walk() == ["K1", "K2", "K4", "K5", "K6"]
    assert walk() == ["K1", "K2", "K4", "K5", "K6"], "page 1 starts a walk with no shift"
    assert api.snapshot().faults == {"list_shifted": 2}
