"""The field diff (what a PATCH carries) and the PUT merge: pure functions over plain dicts."""

from __future__ import annotations

from decimal import Decimal

from skuferry.sync.write.fields import Ownership, after_update, changes, differing, put_body

OWN = Ownership(create_only=frozenset({"description"}))
NULLS = Ownership(create_only=frozenset({"description"}), send_nulls=True)
SENT = {
    "sku": "A-1",
    "name": "Drill",
    "description": "ERP text",
    "price": Decimal("19.90"),
    "stock": 4,
}


def test_nothing_changed_means_nothing_to_send() -> None:
    assert changes(dict(SENT), SENT, OWN) == {}


def test_one_changed_field_is_all_a_patch_carries() -> None:
    assert changes({**SENT, "price": Decimal("21.00")}, SENT, OWN) == {"price": Decimal("21.00")}


def test_a_number_written_differently_is_not_a_change() -> None:
    assert changes({**SENT, "price": Decimal("19.9")}, SENT, OWN) == {}
    assert changes({**SENT, "stock": True}, SENT, OWN) == {"stock": True}, "bool is no number"


def test_a_change_of_create_only_fields_alone_sends_nothing() -> None:
    assert changes({**SENT, "description": "New ERP text"}, SENT, OWN) == {}


def test_a_new_field_goes_out_and_an_emptied_one_goes_out_as_null() -> None:
    current = {**SENT, "ean": "04005129805983", "name": None}
    assert changes(current, SENT, OWN) == {"ean": "04005129805983", "name": None}


def test_a_dropped_field_is_left_alone_without_send_nulls() -> None:
    current = {k: v for k, v in SENT.items() if k != "stock"}
    assert changes(current, SENT, OWN) == {}


def test_a_dropped_field_is_sent_as_null_with_send_nulls_and_then_forgotten() -> None:
    current = {k: v for k, v in SENT.items() if k not in ("stock", "description")}
    body = changes(current, SENT, NULLS)
    assert body == {"stock": None}, "a dropped create-only field is the CMS's: never nulled"
    after = after_update(SENT, body, current)
    assert "stock" not in after
    assert changes(current, after, NULLS) == {}, "nulled once, not again"


def test_unknown_sent_means_every_owned_field() -> None:
    assert changes(SENT, None, OWN) == {k: v for k, v in SENT.items() if k != "description"}


def test_after_update_keeps_what_was_not_sent() -> None:
    body = {"price": Decimal("21.00")}
    assert after_update(SENT, body, {**SENT, **body}) == {**SENT, **body}


def test_put_keeps_the_remotes_fields_and_create_only_values_under_the_owned_ones() -> None:
    remote = {
        "id": "p_1",
        "sku": "A-1",
        "name": "Drill",
        "description": "Staff text",
        "price": Decimal("19.90"),
        "stock": 4,
        "badge": "new",
    }
    current = {**SENT, "price": Decimal("21.00"), "description": "New ERP text"}
    body = put_body(current, remote, SENT, OWN)
    assert body == {
        "sku": "A-1",
        "name": "Drill",
        "description": "Staff text",
        "price": Decimal("21.00"),
        "stock": 4,
        "badge": "new",
    }


def test_put_nulls_a_dropped_field_only_with_send_nulls() -> None:
    remote = {"id": "p_1", **SENT}
    current = {k: v for k, v in SENT.items() if k != "stock"}
    assert put_body(current, remote, SENT, OWN)["stock"] == 4
    assert put_body(current, remote, SENT, NULLS)["stock"] is None


def test_differing_looks_only_at_owned_fields() -> None:
    remote = {**SENT, "id": "p_1", "description": "Staff text", "badge": "new"}
    assert differing(SENT, remote, OWN) == []
    assert differing({**SENT, "price": Decimal("20")}, remote, OWN) == ["price"]
    assert differing({**SENT, "ean": "1"}, remote, OWN) == ["ean"], "missing there: differs"
