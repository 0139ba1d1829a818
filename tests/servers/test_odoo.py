"""The Odoo test server against Odoo 19's External JSON-2 API docs, with plain httpx."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from skuferry.sandbox.pims import odoo
from skuferry.sandbox.pims.catalog import BASE_TIME, STEP
from skuferry.sandbox.pims.odoo import OdooServer, make_records

pytestmark = pytest.mark.integration

FIELDS = ["default_code", "name", "barcode", "list_price", "qty_available", "categ_id"]


@pytest.fixture
def srv() -> Iterator[OdooServer]:
    with OdooServer(make_records(25)) as server:
        yield server


def call(srv: OdooServer, method: str, key: str = odoo.API_KEY, **params: Any) -> httpx.Response:
    return httpx.post(
        f"{srv.url}/json/2/product.product/{method}",
        headers={"Authorization": f"bearer {key}", "X-Odoo-Database": odoo.DATABASE},
        json=params,
    )


def test_search_read_pages_by_offset_and_answers_a_bare_array(srv: OdooServer) -> None:
    seen: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = call(
            srv, "search_read", domain=[], fields=FIELDS, offset=offset, limit=10, order="id"
        )
        assert page.status_code == 200 and isinstance(page.json(), list)
        seen += page.json()
        if len(page.json()) < 10:
            break
        offset += 10
    assert len(seen) == 23, "archived products (11 and 22) are left out, as Odoo does"
    first = seen[0]
    assert first == {
        "id": 1,
        "default_code": "000001",
        "name": "Fahrradschloss Größe M",
        "barcode": "4000000000013",
        "list_price": 899.0,
        "qty_available": 0.0,
        "categ_id": [4, "All / Saleable / Outdoor"],
    }
    assert seen[6]["barcode"] is False, "an empty field is false"


def test_write_date_domain_and_count(srv: OdooServer) -> None:
    since = (BASE_TIME + STEP * 20).strftime("%Y-%m-%d %H:%M:%S")
    domain = [["write_date", ">", since]]
    rows = call(srv, "search_read", domain=domain, fields=["default_code"], order="id").json()
    assert [r["default_code"] for r in rows] == ["000023", "000024", "AB-00025"]  # 22 archived
    assert call(srv, "search_count", domain=domain).json() == 3
    everything = call(
        srv, "search_count", domain=["|", ["active", "=", True], ["active", "=", False]]
    ).json()
    assert everything == 25
    assert call(srv, "search_count", domain=[["active", "=", False]]).json() == 2


def test_bad_key_gets_odoos_error_object(srv: OdooServer) -> None:
    refused = call(srv, "search_read", key="wrong", domain=[])
    assert refused.status_code == 401
    body = refused.json()
    assert body["name"] == "werkzeug.exceptions.Unauthorized"
    assert body["message"] == "Invalid apikey" and body["arguments"] == ["Invalid apikey", 401]
    no_db = httpx.post(
        f"{srv.url}/json/2/product.product/search_read",
        headers={"Authorization": f"bearer {odoo.API_KEY}"},
        json={},
    )
    assert no_db.status_code == 404


def test_unknown_parameter_and_field_are_422(srv: OdooServer) -> None:
    bad_param = call(srv, "search_read", domain=[], badparameter=1)
    assert bad_param.status_code == 422 and "unexpected keyword" in bad_param.json()["message"]
    bad_field = call(srv, "search_read", domain=[], fields=["colour"])
    assert bad_field.status_code == 422


def test_read_by_ids_and_order(srv: OdooServer) -> None:
    rows = call(srv, "read", ids=[2, 3], fields=["default_code"]).json()
    assert rows == [{"id": 2, "default_code": "000002"}, {"id": 3, "default_code": "000003"}]
    newest = call(
        srv, "search_read", domain=[], fields=["id"], limit=1, order="write_date desc"
    ).json()
    assert newest == [{"id": 25}]


def test_page_fault_and_touch(srv: OdooServer) -> None:
    srv.fail_page(2)
    assert call(srv, "search_read", domain=[], offset=10, limit=10).status_code == 500
    assert call(srv, "search_read", domain=[], offset=10, limit=10).status_code == 200
    srv.touch("000003", BASE_TIME + STEP * 100)
    since = (BASE_TIME + STEP * 50).strftime("%Y-%m-%d %H:%M:%S")
    rows = call(srv, "search_read", domain=[["write_date", ">", since]], fields=["name"]).json()
    assert rows == [{"id": 3, "name": "geändert"}]


def test_write_date_takes_only_odoos_datetime_format(srv: OdooServer) -> None:
    answer = call(srv, "search_read", domain=[["write_date", ">", "2026-11-01T08:20:00Z"]])
    assert answer.status_code == 422 and answer.json()["name"] == "builtins.ValueError"
    assert call(srv, "search_count", domain=[["write_date", ">", "2026-11-01"]]).json() == 23
