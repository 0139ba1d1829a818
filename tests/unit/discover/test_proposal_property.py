"""Generated exports: whatever the column order, the header spellings (six languages) and
the value styles (delimiter, encoding, decimal and thousands marks), the config ``init``
proposes reads every generated record exactly: the right key, and each field's value.
"""

from __future__ import annotations

import csv
import io
import tempfile
import tomllib
from decimal import Decimal
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skuferry.discover import read
from skuferry.discover.propose import propose
from skuferry.discover.render import render
from skuferry.models import RawRecord
from skuferry.sources.dispatch import open_source
from skuferry.sync.map.checks import gtin_valid
from skuferry.sync.map.mapper import Mapper

SPELLINGS = {
    "sku": ["SKU", "sku", "Artikelnummer", "Art.-Nr.", "ItemNo", "Référence", "Código",
            "Codice articolo", "Artikelcode", "Item number"],
    "name": ["Name", "Bezeichnung", "Désignation", "Nombre", "Nome", "Naam", "Title",
             "Artikelbezeichnung", "Product name"],
    "price": ["Price", "VK-Preis", "Prix TTC", "Precio", "Prezzo", "Prijs", "Unit price",
              "Verkaufspreis"],
    "stock": ["Stock", "Bestand", "Quantité", "Existencias", "Giacenza", "Voorraad", "Qty",
              "Lagerbestand"],
    "ean": ["EAN", "GTIN", "Code EAN", "Barcode", "EAN13"],
    "brand": ["Brand", "Hersteller", "Marque", "Marca", "Merk", "Manufacturer"],
}  # fmt: skip
# (decimal mark, thousands separator); the delimiter never equals the decimal mark unquoted:
# the csv writer quotes such cells, as exporters do
STYLES = [(".", None), (",", None), (",", "."), (".", ","), (",", " "), (",", "\u00a0")]
DELIMITERS = [",", ";", "\t", "|"]
ENCODINGS = ["utf-8", "utf-8-sig", "cp1252"]
WORDS = ["Bohrer", "Säge", "Théière", "Martillo", "Cacciavite", "Zaag", "drill", "Wasserwaage"]


def _gtin(body: str) -> str:
    return next(body + d for d in "0123456789" if gtin_valid(body + d))


def _number(value: Decimal, decimal: str, thousands: str | None, *, fraction: bool) -> str:
    whole, _, cents = f"{value:.2f}".partition(".")
    if thousands is not None:
        whole = f"{int(whole):,}".replace(",", thousands)
    return f"{whole}{decimal}{cents}" if fraction else whole


@st.composite
def exports(draw: st.DrawFn) -> dict[str, Any]:
    fields = ["sku", "name", "price", *draw(st.sets(st.sampled_from(["stock", "ean", "brand"])))]
    order = draw(st.permutations(fields))
    names = {f: draw(st.sampled_from(SPELLINGS[f])) for f in order}
    style = draw(st.sampled_from(STYLES))
    count = draw(st.integers(min_value=3, max_value=25))
    zeros = draw(st.booleans())
    rows: list[dict[str, Any]] = []
    for i in range(count):
        cents = draw(st.integers(min_value=1, max_value=250_000_00))
        rows.append({
            "sku": f"{i + 1:06d}" if zeros else f"K-{i + 1}-{draw(st.sampled_from('ABC'))}",
            "name": f"{draw(st.sampled_from(WORDS))} {i + 1}",
            "price": Decimal(cents) / 100,
            "stock": draw(st.integers(min_value=0, max_value=50_000)),
            "ean": _gtin(f"400638{i:06d}"),
            "brand": draw(st.sampled_from(["Muster", "Dupré", "Hecht & Co"])),
        })  # fmt: skip
    return {
        "order": order,
        "names": names,
        "style": style,
        "delimiter": draw(st.sampled_from(DELIMITERS)),
        "encoding": draw(st.sampled_from(ENCODINGS)),
        "rows": rows,
    }


def _write(export: dict[str, Any], path: Path) -> None:
    decimal, thousands = export["style"]
    out = io.StringIO()
    writer = csv.writer(out, delimiter=export["delimiter"], lineterminator="\r\n")
    writer.writerow([export["names"][f] for f in export["order"]])
    for row in export["rows"]:
        cells = []
        for f in export["order"]:
            value = row[f]
            if f == "price":
                value = _number(value, decimal, thousands, fraction=True)
            elif f == "stock":
                value = _number(Decimal(value), decimal, thousands, fraction=False)
            cells.append(value)
        writer.writerow(cells)
    path.write_bytes(out.getvalue().encode(export["encoding"]))


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(exports())
def test_the_proposed_config_reads_every_generated_record_exactly(export: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        path = folder / "export.csv"
        _write(export, path)
        sample = read.sample(str(path), folder=folder, env={})
        proposal = propose(sample)
        assert proposal.key is not None
        assert proposal.key.column.name == export["names"]["sku"]
        mapped = {c.target: c.source_name for c in proposal.fields}
        expected_columns = {f: export["names"][f] for f in export["order"] if f != "sku"}
        assert mapped == expected_columns, proposal.notes
        text = render(proposal, base_url=None, state_path="s.db", origin="export.csv",
                      read="all", command="skuferry init")  # fmt: skip
        config = read.load(tomllib.loads(text), folder=folder, env={}, origin="skuferry.toml")
        mapper = Mapper(config.mapping, source_name="export.csv")
        products = []
        for record in open_source(config.source).records():
            assert isinstance(record, RawRecord), record
            products.append(mapper.map(record))
        assert len(products) == len(export["rows"])
        for product, row in zip(products, export["rows"], strict=True):
            payload = getattr(product, "payload", None)
            assert payload is not None, product
            for f in export["order"]:
                assert payload[f] == row[f], (f, payload[f], row[f], text)
