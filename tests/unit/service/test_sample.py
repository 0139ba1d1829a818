"""``check``'s sample rendering: records JSON-like, numbers verbatim, long values cut."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

from skuferry.config.schema import FieldSpec, MappingSettings
from skuferry.models import BadRecord, RawRecord
from skuferry.service.sample import MAX_ITEMS, MAX_TEXT, Sample, json_like, render, sampled
from skuferry.sync.map.mapper import Mapper


def test_text_is_quoted_and_numbers_keep_their_digits() -> None:
    shown = json_like({"price": "19.90", "amount": Decimal("19.90"), "qty": 3, "f": 21.35})
    assert shown == '{\n  "price": "19.90",\n  "amount": 19.90,\n  "qty": 3,\n  "f": 21.35\n}'
    assert json.loads(shown) == {"price": "19.90", "amount": 19.9, "qty": 3, "f": 21.35}


def test_nesting_is_indented_and_source_order_kept() -> None:
    shown = json_like({"z": [{"b": None, "a": True}], "a": {}})
    assert shown.splitlines() == [
        "{",
        '  "z": [',
        "    {",
        '      "b": null,',
        '      "a": true',
        "    }",
        "  ],",
        '  "a": {}',
        "}",
    ]


def test_long_text_and_long_lists_are_cut_saying_how_much() -> None:
    text = "x" * (MAX_TEXT + 30)
    assert json_like(text) == f'"{"x" * MAX_TEXT}..." ({MAX_TEXT + 30:,} characters)'
    shown = json_like(list(range(MAX_ITEMS + 5)))
    assert shown.splitlines()[-2:] == ["  ... 5 more", "]"]


def test_values_that_are_not_json_are_shown_as_python_shows_them() -> None:
    assert json_like(dt.date(2024, 2, 29)) == "datetime.date(2024, 2, 29)"
    assert json_like(float("nan")) == "nan"


def test_sampled_keeps_the_first_n_and_passes_everything_on() -> None:
    mapper = Mapper(MappingSettings(key="sku", fields={"sku": "s", "p": FieldSpec(
        column="p", type="decimal")}))  # fmt: skip
    unreadable = BadRecord(3, "c.csv line 3: 4 fields, the header has 3")
    records: list[RawRecord | BadRecord] = [
        RawRecord(2, {"s": "A", "p": "1.50"}), unreadable,
        RawRecord(4, {"s": "B", "p": "x"}), RawRecord(5, {"s": "C", "p": "2"}),
    ]  # fmt: skip
    kept: list[Sample] = []
    results = list(sampled(records, mapper, keep=3, into=kept))
    assert len(results) == 4 and len(kept) == 3
    assert kept[1] == Sample(unreadable, unreadable)
    lines = render(kept)
    assert lines[0] == "record 1 (line 2), as read from the source:"
    assert "  mapped to the payload sent for key 'A':" in lines
    assert "record 2 (line 3): the source could not read it:" in lines
    assert "  mapped: rejected:" in lines
    assert "  source line 4, column 'p': 'x' is not a decimal number" in lines
    assert not any(line.startswith("record 4") for line in lines)
