"""The shape contract's one rule (``shape.decide``), what is kept (``learn``), and the keys
that came back reformatted (``renamed_keys``). Pure: shapes in, verdicts out."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skuferry.shape import (
    MIN_FORMAT_KEYS,
    FieldShape,
    KeyFormat,
    Shape,
    decide,
    learn,
    normal,
    renamed_keys,
)

HEADER = ("ItemNo", "Description", "UnitPrice")


def _csv(header: tuple[str, ...] = HEADER, keys: list[str] | None = None, **absent: str) -> Shape:
    """A CSV's shape: sku, name, price read from ``header``'s columns (``absent``: a field
    whose column is read under another name)."""
    reads = {"sku": "ItemNo", "name": "Description", "price": "UnitPrice", **absent}
    fields = tuple(
        FieldShape(t, "column", c, 8 if c in header else 0, 8, c in header)
        for t, c in reads.items()
    )
    key = KeyFormat.of(keys if keys is not None else [f"{i:05d}" for i in range(1, 9)])
    return Shape("products.csv", header, fields, key, 8, whole=True)


def _json(given_price: int, *, whole: bool = True, looked: int = 5) -> Shape:
    fields = (
        FieldShape("sku", "path", "sku", looked, looked),
        FieldShape("price", "path", "price", given_price, looked, given_price > 0),
    )
    return Shape("api", None, fields, KeyFormat.of(["A", "B"]), looked, whole, ("sku", "pricing"))


def test_a_renamed_column_breaks_the_contract_naming_field_column_and_closest() -> None:
    learned = _csv()
    seen = _csv(("ItemNo", "Description", "Price (EUR)"))
    verdict = decide(learned, seen, key="sku")
    assert not verdict.holds
    (change,) = verdict.breaking
    assert change.target == "price"
    assert (
        "field 'price' reads column 'UnitPrice', which the header of products.csv no longer "
        in (change.text)
    )
    assert "closest: 'Price (EUR)'" in change.text
    message = verdict.message("products.csv", accept="skuferry accept-shape --config c.toml")
    assert "nothing was written" in message and "skuferry accept-shape --config c.toml" in message
    assert "--force does not accept" in message


def test_a_missing_column_breaks_even_without_a_learnt_shape() -> None:
    verdict = decide(None, _csv(("ItemNo", "Description")), key="sku")
    assert [c.target for c in verdict.breaking] == ["price"]
    assert "does not have" in verdict.breaking[0].text


def test_a_missing_key_column_is_one_change_listing_the_header() -> None:
    verdict = decide(None, _csv(("SKU", "Description", "UnitPrice")), key="sku")
    (change,) = verdict.breaking
    assert change.text.startswith("the key 'sku' reads column 'ItemNo', which is not in the header")
    assert "the header: SKU, Description, UnitPrice" in change.text


def test_reordered_columns_hold_and_are_told() -> None:
    verdict = decide(_csv(), _csv(("UnitPrice", "ItemNo", "Description")), key="sku")
    assert verdict.holds
    assert [c.text for c in verdict.changes] == ["the columns are in another order"]


def test_a_column_accepted_as_absent_holds_then_comes_back() -> None:
    seen = _csv(("ItemNo", "Description"))
    accepted = learn(_csv(), seen, accepted=True)
    assert accepted.gone() == {"price"}
    assert decide(accepted, seen, key="sku").holds
    back = decide(accepted, _csv(), key="sku")
    assert back.holds and "back in the header" in back.changes[0].text
    assert learn(accepted, _csv(), accepted=False).gone() == set()


def test_a_path_that_gave_values_and_gives_none_in_a_whole_pull_breaks() -> None:
    verdict = decide(_json(5), _json(0), key="sku")
    (change,) = verdict.breaking
    assert "field 'price' reads path 'price', which gave a value in 5 of 5 record(s)" in change.text
    assert "the records hold: sku, pricing" in change.text


@pytest.mark.parametrize(
    ("before", "now", "holds"),
    [
        (0, 0, True),  # it never gave one
        (5, 1, True),  # fewer, not none
        (5, 0, False),
    ],
)
def test_a_path_breaks_only_when_it_gives_none_after_giving(
    before: int, now: int, holds: bool
) -> None:
    assert decide(_json(before), _json(now), key="sku").holds is holds


def test_an_incremental_pull_proves_no_field_gone() -> None:
    assert decide(_json(5), _json(0, whole=False), key="sku").holds


def test_a_path_accepted_as_gone_holds_while_it_gives_nothing() -> None:
    accepted = learn(_json(5), _json(0), accepted=True)
    assert accepted.gone() == {"price"}
    assert decide(accepted, _json(0), key="sku").holds
    assert learn(accepted, _json(0), accepted=False).gone() == {"price"}, "still gone"
    assert learn(accepted, _json(3), accepted=False).gone() == set(), "given again"


def test_what_an_old_state_last_sent_is_its_contract() -> None:
    old = Shape.from_sent({"sku", "name", "price"})
    assert not decide(old, _csv(("ItemNo", "Description")), key="sku").holds
    assert not decide(old, _json(0), key="sku").holds
    assert decide(old, _csv(), key="sku").holds


@pytest.mark.parametrize(
    ("before", "now", "what"),
    [
        ([f"{i:05d}" for i in range(1, 31)], [str(i) for i in range(1, 31)], "start with a zero"),
        ([f"abc-{i}" for i in range(30)], [f"ABC-{i}" for i in range(30)], "lower-case"),
        ([str(i) for i in range(30)], [f"SKU{i}" for i in range(30)], "digits only"),
    ],
)
def test_keys_whose_format_changed_wholesale_break(
    before: list[str], now: list[str], what: str
) -> None:
    verdict = decide(_csv(keys=before), _csv(keys=now), key="sku")
    (change,) = verdict.breaking
    assert change.text.startswith("the key's format changed") and what in change.text


def test_a_growing_catalog_keeps_its_key_format() -> None:
    before = [str(i) for i in range(1, 40)]
    now = [str(i) for i in range(1, 200)]
    assert decide(_csv(keys=before), _csv(keys=now), key="sku").holds
    few = [str(i) for i in range(MIN_FORMAT_KEYS - 1)]
    assert decide(_csv(keys=[f"0{k}" for k in few]), _csv(keys=few), key="sku").holds


def test_a_shape_round_trips_through_its_stored_form() -> None:
    shape = learn(_csv(), _csv(("ItemNo", "Description")), accepted=True)
    assert Shape.from_json(shape.to_json()) == shape
    assert Shape.from_json('{"version": 99}') is None
    assert Shape.from_json("not json") is None


# --- keys that came back reformatted -----------------------------------------------------


def test_obvious_normalisations() -> None:
    assert normal(" 00123 ") == "123" == normal("123")
    assert normal("ABC-1") == normal("abc-1")
    assert normal("000") == "0"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ([f"{i:05d}" for i in range(1, 9)], [str(i) for i in range(1, 9)]),  # zeros stripped
        ([f"abc-{i}" for i in range(8)], [f"ABC-{i}" for i in range(8)]),  # case
        ([f"{i:05d}" for i in range(1, 9)], [f"SKU-{i:05d}" for i in range(1, 9)]),  # a prefix
        ([f"A{i}" for i in range(8)], [f"A{i}-DE" for i in range(8)]),  # a suffix
    ],
)
def test_reformatted_keys_are_paired_with_the_ones_that_left(
    old: list[str], new: list[str]
) -> None:
    assert list(renamed_keys(old, new)) == list(zip(old, new, strict=True))


def test_new_keys_that_equal_no_vanished_one_are_not_paired() -> None:
    assert list(renamed_keys(["A-1", "A-2"], ["B-1", "B-2", "C-3"])) == []
    assert list(renamed_keys([], ["1"])) == []
    # two vanished keys of one form: which one came back cannot be told
    assert list(renamed_keys(["01", "001"], ["1"])) == []


@given(
    st.sets(st.from_regex(r"[A-Za-z0-9]{1,8}", fullmatch=True), min_size=1, max_size=30),
    st.sampled_from(["zeros", "upper", "lower", "prefix", "suffix"]),
)
def test_every_reformatted_key_is_found(keys: set[str], how: str) -> None:
    """Whatever the keys, a change applied to all of them pairs each with its old self
    (unless two old keys share a normal form, or the change leaves a key as it was)."""
    changes: dict[str, Callable[[str], str]] = {
        "zeros": lambda k: k.lstrip("0") or "0",
        "upper": str.upper,
        "lower": str.lower,
        "prefix": lambda k: "X-" + k,
        "suffix": lambda k: k + "-Z",
    }
    change = changes[how]
    old = sorted(keys)
    forms = [normal(k) for k in old]
    pairs = {o: change(o) for o in old if change(o) != o and forms.count(normal(o)) == 1}
    new = sorted(set(pairs.values()) - set(old))
    found = dict(renamed_keys([o for o in old if o in pairs], new))
    if len(new) >= 2 or how in ("zeros", "upper", "lower"):
        assert {o: n for o, n in found.items()} == {o: n for o, n in pairs.items() if n in new}
