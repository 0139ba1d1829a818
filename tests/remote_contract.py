"""The contract every ``RemoteApi`` passes (subclass ``RemoteContract`` in a test module).

A subclass provides the ``make`` fixture: a factory of fresh, empty remotes.
The tests are shared, so the in-memory fake (``tests/fakes.py``) and
``RemoteClient`` against the sandbox promise the same behaviour: what the
engine's tests learn from the fake holds on the wire.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal, Protocol

import pytest

from skuferry import errors
from skuferry.remote.client import RemoteApi

Updates = Literal["patch", "put", "both"]


class MakeRemote(Protocol):
    def __call__(
        self, *, updates: Updates | None = "both", allowed: dict[str, int] | None = None
    ) -> RemoteApi:
        """An empty remote; ``updates`` the methods it accepts on a product (None: neither),
        ``allowed`` per tier the requests it answers before every later one is rate limited."""
        ...


def product(sku: str, **fields: Any) -> dict[str, Any]:
    return {"sku": sku, "name": f"Product {sku}", **fields}


class RemoteContract:
    @pytest.fixture
    def make(self) -> Iterator[MakeRemote]:
        raise NotImplementedError

    # -- list and paging -----------------------------------------------------------

    def test_an_empty_catalog_has_no_pages(self, make: MakeRemote) -> None:
        remote = make()
        assert list(remote.iter_pages()) == []
        assert list(remote.iter_products()) == []
        assert remote.probe() == 0
        assert remote.requests == {"read": 3, "write": 0}  # page 1 each time: 0 pages

    def test_pages_follow_meta_pages_in_insertion_order(self, make: MakeRemote) -> None:
        remote = make()
        skus = [f"P-{i}" for i in range(5)]
        for sku in skus:
            remote.create_product(product(sku))
        pages = list(remote.iter_pages(limit=2))
        assert [(page, total, len(items)) for page, total, items in pages] == [
            (1, 3, 2),
            (2, 3, 2),
            (3, 3, 1),
        ]
        assert [item["sku"] for _p, _t, items in pages for item in items] == skus
        assert [item["sku"] for item in remote.iter_products(limit=2)] == skus
        assert remote.probe() == 5  # pages at limit 1

    @pytest.mark.parametrize("limit", [0, 101])
    def test_a_page_size_out_of_bounds_is_refused_before_any_request(
        self, make: MakeRemote, limit: int
    ) -> None:
        remote = make()
        with pytest.raises(ValueError, match="limit"):
            list(remote.iter_pages(limit=limit))
        assert remote.requests == {"read": 0, "write": 0}

    # -- create and read -------------------------------------------------------------

    def test_create_answers_the_product_with_a_server_id(self, make: MakeRemote) -> None:
        remote = make()
        created = remote.create_product({**product("A-1", price="9.90"), "id": "mine"})
        assert created["id"] not in ("", None, "mine")  # the server owns ids
        assert {k: v for k, v in created.items() if k != "id"} == product("A-1", price="9.90")
        assert remote.get_product(str(created["id"])) == created

    def test_creates_are_not_idempotent(self, make: MakeRemote) -> None:
        remote = make()
        first = remote.create_product(product("A-1"))
        second = remote.create_product(product("A-1"))
        assert first["id"] != second["id"]
        assert [item["sku"] for item in remote.iter_products()] == ["A-1", "A-1"]

    # -- updates -----------------------------------------------------------------------

    def test_patch_merges_into_the_product(self, make: MakeRemote) -> None:
        remote = make()
        rid = str(remote.create_product(product("A-1", price="1.00", color="red"))["id"])
        answer = remote.update_product(rid, {"sku": "A-1", "price": "2.00"}, method="patch")
        expected = {**product("A-1", price="2.00", color="red"), "id": rid}
        assert answer == expected
        assert remote.get_product(rid) == expected

    def test_put_replaces_the_product(self, make: MakeRemote) -> None:
        remote = make()
        rid = str(remote.create_product(product("A-1", price="1.00", color="red"))["id"])
        answer = remote.update_product(rid, product("A-1", price="2.00"), method="put")
        expected = {**product("A-1", price="2.00"), "id": rid}
        assert answer == expected
        assert remote.get_product(rid) == expected

    # -- error shapes ------------------------------------------------------------------

    def test_an_unknown_id_is_not_found(self, make: MakeRemote) -> None:
        remote = make()
        with pytest.raises(errors.NotFound) as read:
            remote.get_product("p_999999")
        with pytest.raises(errors.NotFound) as write:
            remote.update_product("p_999999", product("A-1"), method="patch")
        assert read.value.status == write.value.status == 404

    @pytest.mark.parametrize(
        ("updates", "method"), [("patch", "put"), ("put", "patch"), (None, "patch")]
    )
    def test_an_update_method_the_server_lacks_is_405(
        self, make: MakeRemote, updates: Updates | None, method: Literal["patch", "put"]
    ) -> None:
        remote = make(updates=updates)
        rid = str(remote.create_product(product("A-1", price="1.00"))["id"])
        with pytest.raises(errors.MethodNotAllowed) as caught:
            remote.update_product(rid, product("A-1", price="2.00"), method=method)
        assert caught.value.status == 405
        assert remote.get_product(rid)["price"] == "1.00"

    def test_invalid_products_are_rejected_with_422_and_not_stored(self, make: MakeRemote) -> None:
        remote = make()
        with pytest.raises(errors.Rejected) as caught:
            remote.create_product({"sku": "A-1", "price": "1.00"})
        assert (caught.value.status, caught.value.code) == (422, "VALIDATION_ERROR")
        assert "name" in caught.value.message
        assert remote.probe() == 0
        rid = str(remote.create_product(product("A-1"))["id"])
        with pytest.raises(errors.Rejected):
            remote.update_product(rid, {"sku": "A-1", "price": "2"}, method="put")
        with pytest.raises(errors.Rejected):
            remote.update_product(rid, {"name": " "}, method="patch")
        # PATCH checks only the fields it sends
        assert remote.update_product(rid, {"price": "2"}, method="patch")["name"] == "Product A-1"

    def test_rate_limited_is_429_with_retry_after_and_counted(self, make: MakeRemote) -> None:
        remote = make(allowed={"read": 1})
        rid = str(remote.create_product(product("A-1"))["id"])
        remote.get_product(rid)
        with pytest.raises(errors.RateLimited) as caught:
            remote.get_product(rid)
        assert (caught.value.status, caught.value.code) == (429, "RATE_LIMITED")
        assert caught.value.retry_after is not None and caught.value.retry_after > 0
        assert remote.rate_limited == 1
        assert remote.requests == {"read": 2, "write": 1}  # the refused request counts too

    def test_requests_are_counted_per_tier(self, make: MakeRemote) -> None:
        remote = make()
        rid = str(remote.create_product(product("A-1"))["id"])
        remote.update_product(rid, {"price": "2"}, method="patch")
        remote.get_product(rid)
        list(remote.iter_pages())
        assert remote.requests == {"read": 2, "write": 2}
        assert remote.rate_limited == 0
