"""A proposal: the answers change it as said, its TOML is exactly its data and loads, and the
presets' mappings are their worked examples'."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from skuferry.discover import propose as p
from skuferry.discover.known import KNOWN, recognise
from skuferry.discover.model import Sample
from skuferry.discover.read import load
from skuferry.discover.render import config_data, render, toml_value
from skuferry.discover.session import converse

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

ROWS = [
    {"SKU": f"A-{i}", "Artikelnummer": f"{i:05d}", "Bezeichnung": f"Bohrer {i} mm",
     "Preis": f"{i},50", "Menge": str(i * 2), "Geändert": f"2026-11-{i:02d} 10:00:00"}
    for i in range(1, 9)
]  # fmt: skip


def _sample(rows: list[dict[str, Any]] = ROWS) -> Sample:
    source = {"type": "csv", "path": "a.csv", "encoding": "utf-8", "delimiter": ";"}
    return Sample(source, tuple(rows), complete=True, origin="a.csv", kind="csv")


def test_two_key_candidates_alike_are_asked_and_the_answer_switches_the_key() -> None:
    proposal = p.propose(_sample())
    asked = next(q for q in proposal.questions if q.topic == "key")
    assert {label for label, _ in asked.options} >= {"SKU", "Artikelnummer"}
    assert proposal.key is not None
    key = proposal.key.column.name
    other = next(i for i, (label, _) in enumerate(asked.options) if label != key)
    answered = p.answer(proposal, asked, other)
    assert answered.key is not None and answered.key.column.name == asked.options[other][0]
    assert not [q for q in answered.questions if q.topic == "key"]
    assert proposal.key is not None
    assert any(name == proposal.key.column.name for name, _ in answered.unmapped)


def test_dropping_a_field_lists_its_column_as_left_out() -> None:
    proposal = p.propose(_sample())
    dropped = p.without_field(proposal, "stock")
    assert dropped.field("stock") is None
    assert ("Menge", "was stock; left out by you") in dropped.unmapped
    with pytest.raises(ValueError, match="no field"):
        p.without_field(dropped, "stock")


def test_a_time_without_a_zone_is_said() -> None:
    proposal = p.propose(_sample())
    assert any(q.topic == "date" and "'Geändert'" in q.text for q in proposal.questions)


def _loaded(text: str, folder: Path) -> Any:
    return load(tomllib.loads(text), folder=folder, env={}, origin="skuferry.toml")


def test_the_toml_holds_exactly_the_data_and_the_loader_accepts_it(tmp_path: Path) -> None:
    proposal = p.propose(_sample())
    text = render(proposal, base_url=None, state_path="x.db", origin="a.csv", read="all",
                  command="skuferry init --from a.csv")  # fmt: skip
    data = config_data(proposal, base_url=None, state_path="x.db")
    assert tomllib.loads(text) == data
    settings = _loaded(text, tmp_path)
    assert settings.mapping.key == "sku"
    assert set(data["api"]) == {"base_url"} and "init-placeholder" not in text
    # every column left out is listed as a comment, every question said
    assert "'Geändert'" in text.split("[mapping.fields]")[1]
    assert "Not decided" in text


@pytest.mark.parametrize(
    "value",
    ['a "quoted" path', "it's", "back\\slash", "tab\there", "del\x7f", "ünïcödé", "'''"],
)
def test_toml_strings_read_back_as_written(value: str) -> None:
    assert tomllib.loads(f"x = {toml_value(value)}")["x"] == value


def test_the_answers_are_asked_on_a_terminal_and_the_user_may_quit() -> None:
    proposal = p.propose(_sample())
    shown: list[object] = []
    said: list[str] = []

    class Script:
        answers = iter(["2", "d", "stock", "w"])

        def echo(self, text: str) -> None:
            said.append(text)

        def choose(self, text: str, choices: list[str], default: str) -> str:
            return next(self.answers)

    chosen = converse(proposal, shown.append, Script())
    assert chosen is not None and chosen.field("stock") is None
    assert len(shown) >= 3  # the proposal, after the key's answer, after the drop

    class Quit(Script):
        answers = iter(["skip", "q"])

    assert converse(proposal, shown.append, Quit()) is None


def _example(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("known", "example"),
    [
        ("shopify:csv", "shopify.toml"),
        ("woocommerce:csv", "woocommerce.toml"),
        ("magento:csv", "magento.toml"),
        ("akeneo:http", "connectors/akeneo.toml"),
        ("shopify:graphql", "connectors/shopify.toml"),
        ("business-central:http", "connectors/business-central.toml"),
        ("odoo:http", "connectors/odoo.toml"),
        ("woocommerce:http", "connectors/woocommerce.toml"),
        ("magento:http", "connectors/magento.toml"),
    ],
)
def test_a_presets_mapping_is_its_worked_examples(known: str, example: str) -> None:
    """One mapping per system: what init proposes is what the docs' example shows."""
    name, kind = known.split(":")
    entry = next(k for k in KNOWN if k.name == name and kind in k.types)
    data = _example(EXAMPLES / example)
    fields = {t: s for t, s, _ in entry.fields}
    for spec in fields.values():
        spec.pop("reads", None)
    written = {
        t: ({"column": s} if isinstance(s, str) else s)
        for t, s in data["mapping"]["fields"].items()
    }
    assert fields == written
    extra = {k: v for k, v in data["mapping"].items() if k not in ("key", "fields")}
    assert dict(entry.mapping) == extra
    source_extra = {k: v for k, v in entry.source.items() if k != "record"}
    assert all(data["source"].get(k) == v for k, v in source_extra.items())


def test_recognising_an_export_by_its_columns() -> None:
    shopify = ["Handle", "Title", "Body (HTML)", "Variant SKU", "Variant Price"]
    assert (recognise("csv", shopify) or KNOWN[0]).name == "shopify"
    assert recognise("csv", ["sku", "name", "price"]) is None
    assert recognise("xml", ["SUPPLIER_AID"], record="ARTICLE") is not None
    found = recognise("graphql", [], preset="shopify")
    assert found is not None and found.name == "shopify"
