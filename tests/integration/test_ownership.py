"""Field ownership and discontinued products, judged by what the sandbox received.

Every test runs the real engine against the sandbox over loopback HTTP and reads
the bodies of the PATCH/PUT requests the server accepted
(``Sandbox.updates_received``), so "the update held only the price" is a fact
of the wire, not of skuferry's own bookkeeping.
"""

from __future__ import annotations

import csv
import json
import sqlite3
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from skuferry import canonical
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import Settings
from skuferry.models import RunOptions, RunSummary, State
from skuferry.sandbox import Sandbox
from skuferry.service import report
from skuferry.state import schema
from skuferry.state.mirror import Mirror
from skuferry.sync import engine

from .conftest import KEY, Cli

pytestmark = pytest.mark.integration

ARCHIVED = {"status": "archived", "stock": 0}


def rows(n: int, *, version: int = 0, start: int = 1) -> list[dict[str, str]]:
    """A tool shop's export: ``version`` moves every price."""
    return [
        {
            "SKU": f"TL-{i:05d}",
            "Name": f"Bit set {i}",
            "Description": f"{i}-piece set, chrome vanadium;\ncase included",
            "Price": f"{12 + i % 50}.{(i * 3 + version) % 100:02d}",
            "Stock": str((i * 7) % 90 + 1),
        }
        for i in range(start, n + 1)
    ]


def write_rows(path: Path, items: Sequence[dict[str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.DictWriter(f, fieldnames=["SKU", "Name", "Description", "Price", "Stock"])
        out.writeheader()
        out.writerows(items)


def settings_for(
    tmp_path: Path, url: str, *, method: str = "patch", gone: bool = True, **extra: Any
) -> Settings:
    data: dict[str, Any] = {
        "api": {"base_url": url, "api_key": KEY, "update_method": method, "timeout_s": 5},
        "source": {"type": "csv", "path": "catalog.csv"},
        "mapping": {
            "key": "sku",
            "fields": {
                "sku": "SKU",
                "name": "Name",
                "description": {"column": "Description", "create_only": True},
                "price": {"column": "Price", "type": "decimal"},
                "stock": {"column": "Stock", "type": "integer"},
            },
        },
        "budget": {"read_per_minute": 6000, "write_per_minute": 6000},
        "state": {"path": "state.db"},
        **extra,
    }
    if gone:
        data["gone"] = {"action": "patch", "patch": ARCHIVED, "restore": {"status": "active"}}
    return settings_from_dict(data, base_dir=tmp_path)


@pytest.fixture
def shop(
    tmp_path: Path, sandbox_factory: Callable[..., Sandbox]
) -> Callable[..., tuple[Sandbox, Settings]]:
    def make(n: int, *, updates: str | None = "patch", **kwargs: Any) -> tuple[Sandbox, Settings]:
        sandbox = sandbox_factory(updates=updates)
        write_rows(tmp_path / "catalog.csv", rows(n))
        return sandbox, settings_for(tmp_path, sandbox.url, **kwargs)

    return make


def sync(settings: Settings, **options: Any) -> RunSummary:
    return engine.run_once(settings, RunOptions(**options))


def by_sku(sandbox: Sandbox) -> dict[str, dict[str, Any]]:
    return {str(p["sku"]): p for p in sandbox.products()}


def writes_during(sandbox: Sandbox, run: Callable[[], Any]) -> tuple[Any, dict[str, int]]:
    before = dict(sandbox.stats().requests)
    result = run()
    after = sandbox.stats().requests
    return result, {tier: after.get(tier, 0) - before.get(tier, 0) for tier in ("read", "write")}


# -- field ownership ---------------------------------------------------------------------------


def test_a_patch_carries_only_the_fields_that_changed(
    tmp_path: Path, shop: Callable[..., tuple[Sandbox, Settings]]
) -> None:
    sandbox, settings = shop(40)
    assert sync(settings).created == 40
    changed = rows(40)
    for row in changed[5:8]:
        row["Price"] = "99.95"
    changed[9]["Stock"] = "0"
    write_rows(tmp_path / "catalog.csv", changed)

    summary, spent = writes_during(sandbox, lambda: sync(settings))

    assert summary.updated == 4 and spent == {"read": 0, "write": 4}
    ids = {p["id"]: p["sku"] for p in sandbox.products()}
    received = {ids[u["id"]]: u["body"] for u in sandbox.updates_received()}
    assert received == {
        "TL-00006": {"price": Decimal("99.95")},
        "TL-00007": {"price": Decimal("99.95")},
        "TL-00008": {"price": Decimal("99.95")},
        "TL-00010": {"stock": 0},
    }
    assert all(u["method"] == "PATCH" for u in sandbox.updates_received())
    listed = httpx.get(f"{sandbox.url}/_sandbox/updates").json()  # also over HTTP (admin)
    bodies = [u["body"] for u in listed["data"]]  # in completion order: the pool runs 4 at once
    assert len(bodies) == 4 and {"stock": 0} in bodies and bodies.count({"price": 99.95}) == 3


def test_a_staff_edit_of_a_create_only_field_survives_a_later_price_change(
    tmp_path: Path, shop: Callable[..., tuple[Sandbox, Settings]]
) -> None:
    sandbox, settings = shop(10)
    sync(settings)
    product = by_sku(sandbox)["TL-00003"]
    assert product["description"] == rows(10)[2]["Description"], "sent when created"
    sandbox.edit_product(product["id"], {"description": "Rewritten by the shop's editor"})

    changed = rows(10)
    changed[2]["Price"] = "49.00"
    changed[2]["Description"] = "The ERP's new text, which the CMS owns now"
    write_rows(tmp_path / "catalog.csv", changed)
    summary = sync(settings)

    remote = by_sku(sandbox)["TL-00003"]
    assert summary.updated == 1
    assert remote["description"] == "Rewritten by the shop's editor"
    assert remote["price"] == Decimal("49.00")
    assert [u["body"] for u in sandbox.updates_received()] == [{"price": Decimal("49.00")}]

    # A change of create-only fields alone makes no request at all.
    changed[4]["Description"] = "Another new ERP text"
    write_rows(tmp_path / "catalog.csv", changed)
    quiet, spent = writes_during(sandbox, lambda: sync(settings))
    assert spent == {"read": 0, "write": 0}
    assert quiet.updated == 0 and quiet.unchanged == 10
    assert sync(settings).unchanged == 10, "and the next run plans nothing for it"


def test_a_put_reads_the_product_and_keeps_the_fields_skuferry_does_not_own(
    tmp_path: Path, shop: Callable[..., tuple[Sandbox, Settings]]
) -> None:
    sandbox, settings = shop(10, updates="put", method="put")
    sync(settings)
    target = by_sku(sandbox)["TL-00004"]
    sandbox.edit_product(target["id"], {"description": "Staff text", "badge": "bestseller"})
    changed = rows(10)
    changed[3]["Price"] = "15.50"
    write_rows(tmp_path / "catalog.csv", changed)

    summary, spent = writes_during(sandbox, lambda: sync(settings))

    assert summary.updated == 1
    assert spent == {"read": 1, "write": 1}, "one GET, then one PUT"
    remote = by_sku(sandbox)["TL-00004"]
    assert remote["badge"] == "bestseller" and remote["description"] == "Staff text"
    assert remote["price"] == Decimal("15.50")
    (put,) = sandbox.updates_received()
    assert put["method"] == "PUT"
    assert put["body"]["badge"] == "bestseller", "the remote's own field went back unchanged"


@pytest.mark.parametrize("method", ["patch", "put"])
def test_requests_per_updated_product(
    method: str,
    tmp_path: Path,
    shop: Callable[..., tuple[Sandbox, Settings]],
    figures: Callable[[str], None],
) -> None:
    sandbox, settings = shop(100, updates=method, method=method)
    sync(settings)
    write_rows(tmp_path / "catalog.csv", rows(100, version=1))  # every price moves

    summary, spent = writes_during(sandbox, lambda: sync(settings, force=True))

    assert summary.updated == 100
    per_product = (spent["read"] + spent["write"]) / summary.updated
    figures(
        f"requests per updated product with {method.upper()}: {per_product:g} "
        f"({spent['read']} reads + {spent['write']} writes for {summary.updated})"
    )
    assert spent == (
        {"read": 0, "write": 100} if method == "patch" else {"read": 100, "write": 100}
    )


@pytest.mark.parametrize(("send_nulls", "stock"), [(False, 1), (True, None)])
def test_send_nulls_decides_what_happens_to_a_field_the_source_dropped(
    send_nulls: bool,
    stock: int | None,
    tmp_path: Path,
    shop: Callable[..., tuple[Sandbox, Settings]],
) -> None:
    sandbox, settings = shop(3)
    sync(settings)
    sandbox.edit_product(sandbox.products()[0]["id"], {"stock": 1})  # whatever the remote holds
    fields = dict(settings.mapping.fields or {})
    fields.pop("stock")  # the export lost its stock column
    mapping = {"key": "sku", "fields": fields, "send_nulls": send_nulls}

    summary = sync(settings_for(tmp_path, sandbox.url, mapping=mapping))

    bodies = [u["body"] for u in sandbox.updates_received()]
    assert bodies == ([{"stock": None}] * 3 if send_nulls else [])
    assert summary.clean
    assert sandbox.products()[0]["stock"] == stock


# -- adoption by comparison --------------------------------------------------------------------


def test_products_already_on_the_remote_are_adopted_without_a_write_when_owned_fields_match(
    tmp_path: Path, shop: Callable[..., tuple[Sandbox, Settings]]
) -> None:
    sandbox, settings = shop(6)
    owned = _payloads(rows(6))
    # Already there, with the CMS's own description: create-only, so not compared.
    sandbox.seed_products([{**p, "description": "CMS text"} for p in owned[:4]])
    sandbox.seed_products(
        [
            {
                "sku": "TL-00099",
                "name": "Only on the remote",
                "price": 1,
                "stock": 5,
                "description": "the CMS's",
            }
        ]
    )

    summary, spent = writes_during(sandbox, lambda: sync(settings))

    assert (summary.adopted, summary.created, summary.updated) == (4, 2, 0)
    assert spent["write"] == 2, "only the two missing products are written"

    # The source adds the product found only on the remote (remote_only), as it is there.
    assert report.collect_status(settings)["products"]["remote_only"] == 1
    with (tmp_path / "catalog.csv").open("a", encoding="utf-8") as f:
        f.write("TL-00099,Only on the remote,ERP text,1.00,5\n")
    adopted, spent = writes_during(sandbox, lambda: sync(settings))
    assert adopted.adopted == 1 and adopted.updated == 0
    assert spent == {"read": 1, "write": 0}, "read once, found in step, linked"


def _payloads(items: Sequence[dict[str, str]]) -> list[dict[str, Any]]:
    return [
        {"sku": r["SKU"], "name": r["Name"], "price": Decimal(r["Price"]), "stock": int(r["Stock"])}
        for r in items
    ]


# -- discontinued products ---------------------------------------------------------------------


def test_products_that_leave_are_archived_once_and_restored_when_they_return(
    tmp_path: Path, shop: Callable[..., tuple[Sandbox, Settings]]
) -> None:
    sandbox, settings = shop(300)
    assert sync(settings).created == 300
    everything = rows(300)
    removed = everything[100:112]
    kept = everything[:100] + everything[112:]
    write_rows(tmp_path / "catalog.csv", kept)

    summary, spent = writes_during(sandbox, lambda: sync(settings))

    assert summary.archived == 12 and spent == {"read": 0, "write": 12}, "one request each"
    assert summary.as_json()["archived"] == 12
    ids = {p["id"]: p["sku"] for p in sandbox.products()}
    received = sandbox.updates_received()
    assert sorted(ids[u["id"]] for u in received) == sorted(r["SKU"] for r in removed)
    assert all(u["body"] == ARCHIVED for u in received)
    remote = by_sku(sandbox)
    assert all(remote[r["SKU"]]["status"] == "archived" for r in removed)
    assert len(remote) == 300, "never deleted"

    again, spent = writes_during(sandbox, lambda: sync(settings))
    assert again.archived == 0 and spent["write"] == 0, "not archived again while away"
    status = report.collect_status(settings)
    assert status["products"] == {"archived": 12, "synced": 288}
    assert sorted(a["key"] for a in status["archived"]) == sorted(r["SKU"] for r in removed)

    back = removed[:2]
    write_rows(tmp_path / "catalog.csv", kept + back)
    restored, spent = writes_during(sandbox, lambda: sync(settings))
    assert restored.restored == 2 and restored.as_json()["restored"] == 2
    assert spent["write"] == 2
    for row in back:
        product = by_sku(sandbox)[row["SKU"]]
        assert product["status"] == "active" and product["stock"] == int(row["Stock"])
    bodies = [u["body"] for u in sandbox.updates_received()[12:]]
    assert bodies == [{"status": "active", "stock": int(r["Stock"])} for r in back]
    assert sync(settings).unchanged == 290, "in step again"


def test_a_source_shrunk_to_a_sixth_trips_the_guard_and_nothing_is_written(
    tmp_path: Path, shop: Callable[..., tuple[Sandbox, Settings]], cli: Cli
) -> None:
    sandbox, settings = shop(300)
    sync(settings)
    write_rows(tmp_path / "catalog.csv", rows(50))
    config = tmp_path / "skuferry.toml"
    config.write_text(_toml(sandbox.url), encoding="utf-8")
    before = sandbox.stats().requests.get("write", 0)

    refused = cli.run("sync", "--config", str(config))

    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "250 of 300 known products" in refused.stderr
    assert "max_gone_ratio" in refused.stderr and "--force" in refused.stderr
    assert sandbox.stats().requests.get("write", 0) == before, "zero writes"
    assert sandbox.updates_received() == []
    assert report.collect_status(settings)["products"] == {"synced": 300}, "nor locally"

    forced = cli.run("sync", "--config", str(config), "--force", "--json")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert json.loads(forced.stdout.strip().splitlines()[-1])["archived"] == 250


def _toml(url: str) -> str:
    return f"""\
[api]
base_url = "{url}"
api_key = "{KEY}"
[source]
type = "csv"
path = "catalog.csv"
[mapping.fields]
sku = "SKU"
name = "Name"
description = {{ column = "Description", create_only = true }}
price = {{ column = "Price", type = "decimal" }}
stock = {{ column = "Stock", type = "integer" }}
[budget]
read_per_minute = 6000
write_per_minute = 6000
[gone]
action = "patch"
patch = {{ status = "archived", stock = 0 }}
[state]
path = "state.db"
"""


def test_archiving_is_reported_as_drift_when_the_api_takes_no_updates(
    tmp_path: Path, shop: Callable[..., tuple[Sandbox, Settings]]
) -> None:
    _, settings = shop(20, updates=None)  # the spec lists no PATCH/PUT: 405
    sync(settings)
    write_rows(tmp_path / "catalog.csv", rows(20)[1:])

    summary = sync(settings)

    assert (summary.archived, summary.drift) == (0, 1) and not summary.clean
    assert any("does not accept PATCH" in note for note in summary.notes)
    assert report.collect_status(settings)["products"] == {"drift": 1, "synced": 19}
    assert sync(settings).drift == 1, "tried again next run, reported again"


def test_verify_compares_only_the_fields_skuferry_owns(
    tmp_path: Path, shop: Callable[..., tuple[Sandbox, Settings]]
) -> None:
    sandbox, settings = shop(5)
    sync(settings)
    product = by_sku(sandbox)["TL-00002"]
    sandbox.edit_product(product["id"], {"description": "Staff text", "price": Decimal("1.00")})

    summary = sync(settings, verify=True)

    original = Decimal(rows(5)[1]["Price"])
    assert [u["body"] for u in sandbox.updates_received()] == [{"price": original}]
    assert by_sku(sandbox)["TL-00002"]["description"] == "Staff text"
    assert summary.updated == 1


def test_an_old_state_file_is_migrated_and_its_payloads_become_what_was_last_sent(
    tmp_path: Path, shop: Callable[..., tuple[Sandbox, Settings]]
) -> None:
    sandbox, settings = shop(1)
    old = _payloads(rows(1))[0] | {"description": rows(1)[0]["Description"]}
    (remote,) = sandbox.seed_products([{**old, "description": "Staff text", "badge": "new"}])
    # A state file as the previous version left it: schema 3, the payload last confirmed.
    conn = sqlite3.connect(settings.state.path, isolation_level=None)
    conn.execute("BEGIN")
    for migration in schema.MIGRATIONS[:3]:
        migration(conn)
    conn.execute("PRAGMA user_version = 3")
    conn.execute(
        "INSERT INTO products (key, state, digest, payload, remote_id, first_seen, updated_at) "
        "VALUES (?, 'synced', ?, ?, ?, 0, 0)",
        (old["sku"], canonical.digest(old), canonical.dumps(old), remote["id"]),
    )
    conn.execute("COMMIT")
    conn.close()
    changed = rows(1)
    changed[0]["Price"] = "77.70"
    write_rows(tmp_path / "catalog.csv", changed)

    summary = sync(settings)

    assert summary.updated == 1
    assert [u["body"] for u in sandbox.updates_received()] == [{"price": Decimal("77.70")}]
    mirror = Mirror(settings.state.path)
    try:
        assert mirror.payload(old["sku"]) == {**old, "price": Decimal("77.70")}
        assert mirror.known()[old["sku"]].state is State.SYNCED
    finally:
        mirror.close()
    check = sqlite3.connect(settings.state.path)
    try:
        assert check.execute("PRAGMA user_version").fetchone()[0] >= 4
    finally:
        check.close()


def test_with_put_archive_and_restore_read_first_and_keep_the_rest_of_the_product(
    tmp_path: Path, shop: Callable[..., tuple[Sandbox, Settings]]
) -> None:
    sandbox, settings = shop(5, updates="put", method="put")
    sync(settings)
    target = by_sku(sandbox)["TL-00002"]
    sandbox.edit_product(target["id"], {"badge": "bestseller"})
    write_rows(tmp_path / "catalog.csv", rows(5)[:1] + rows(5)[2:])

    archived, spent = writes_during(sandbox, lambda: sync(settings))

    assert archived.archived == 1 and spent == {"read": 1, "write": 1}
    remote = by_sku(sandbox)["TL-00002"]
    assert (remote["status"], remote["stock"], remote["badge"]) == ("archived", 0, "bestseller")
    assert remote["name"] == target["name"], "a PUT keeps what it does not change"

    write_rows(tmp_path / "catalog.csv", rows(5))
    restored = sync(settings)

    remote = by_sku(sandbox)["TL-00002"]
    assert restored.restored == 1
    assert (remote["status"], remote["stock"]) == ("active", int(rows(5)[1]["Stock"]))
    assert remote["badge"] == "bestseller"
