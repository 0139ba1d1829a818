"""Generative truncation: an export cut at any byte inside a record never reaches the CMS.

For every file format skuferry reads (CSV, JSONL, XLSX, XML, BMEcat, gzip, zip) and for
``[[join]]`` partner files (CSV, JSONL), hypothesis builds two whole exports of one
catalog (realistic values: leading-zero keys, decimal prices, quotes, delimiters and
line breaks inside descriptions, German text, HTML), syncs the first to an in-memory
CMS with ``[gone] action = "patch"``, then cuts the second at a random byte and syncs
that. Required, every time:

- nothing is archived;
- every field on the CMS holds a value of some whole export;
- the run does not exit 0.

A line format is cut strictly inside a record (a cut just after a record's line break
is a whole, shorter export by definition of the rule); 0 bytes is the empty export,
refused. Binary formats (XLSX, gzip, zip) and XML are cut at any byte short of the end.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skuferry import errors
from skuferry.config.load import settings_from_dict
from skuferry.sandbox.catalog_files import bmecat, bmecat_article, write_xlsx_rows
from skuferry.sync.engine import Adapters, run_once
from tests.fakes import FakeRemote

EXAMPLES = 40
FIELDS = ("sku", "name", "price")
PATCH = {"status": "archived"}

# -- catalogs ---------------------------------------------------------------------------
_words = st.sampled_from(
    [
        "Akku-Bohrschrauber",
        "Stichsäge 6,5°",
        'Hammer "Classic"',
        "<p>Soft, warm</p>",
        "Café; mug",
        "چای",
        "Winkelschleifer",
        "Oak\tshelf",
        "L'écrou",
    ]
)
_name = st.lists(_words, min_size=1, max_size=3).map(" ".join)
_price = st.tuples(st.integers(0, 9999), st.integers(0, 99)).map(lambda p: f"{p[0]}.{p[1]:02d}")


@dataclass(frozen=True)
class Catalog:
    rows: list[dict[str, str]]  # sku, name, price, text (a description, may hold a line break)


@st.composite
def catalogs(draw: st.DrawFn) -> tuple[Catalog, Catalog]:
    """Two whole exports of one catalog: same keys, every price and name changed."""
    n = draw(st.integers(3, 8))
    style = draw(st.sampled_from(["{:06d}", "SKU-{:04d}", "0{:d}"]))
    keys = [style.format(i + 1) for i in range(n)]
    first, second = [], []
    for key in keys:
        # Magento's descriptions hold about one line break per product
        text = draw(
            st.sampled_from(
                ["", "a, b; c", "first line\nsecond line", '<p>Soft, "warm"</p>\n<p>Oak</p>']
            )
        )
        first.append({"sku": key, "name": draw(_name), "price": draw(_price), "text": text})
        second.append(
            {"sku": key, "name": draw(_name) + " II", "price": draw(_price) + "1", "text": text}
        )
    return Catalog(first), Catalog(second)


# -- exports: the bytes, and where each record ends (None: any byte is inside) -----------
Export = tuple[bytes, list[int] | None]


def csv_export(catalog: Catalog, *, delimiter: str = ",", newline: str = "\n") -> Export:
    ends: list[int] = []
    out = io.BytesIO()
    for row in [dict(zip(catalog.rows[0], catalog.rows[0], strict=True)), *catalog.rows]:
        text = io.StringIO()
        csv.writer(text, delimiter=delimiter, lineterminator=newline).writerow(row.values())
        out.write(text.getvalue().encode("utf-8"))
        ends.append(out.tell())
    return out.getvalue(), ends


def jsonl_export(catalog: Catalog) -> Export:
    ends: list[int] = []
    out = io.BytesIO()
    for row in catalog.rows:
        out.write(json.dumps(row, ensure_ascii=False).encode("utf-8") + b"\n")
        ends.append(out.tell())
    return out.getvalue(), ends


def xml_export(catalog: Catalog) -> Export:
    items = "".join(
        f"<product><sku>{escape(r['sku'])}</sku><name>{escape(r['name'])}</name>"
        f"<price>{r['price']}</price><text>{escape(r['text'])}</text></product>\n"
        for r in catalog.rows
    )
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<catalog>\n{items}</catalog>\n'.encode(), None


def bmecat_export(catalog: Catalog) -> Export:
    articles = [bmecat_article(r["sku"], r["name"], price=r["price"]) for r in catalog.rows]
    return bmecat(articles).encode("utf-8"), None


def xlsx_export(catalog: Catalog) -> Export:
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "x.xlsx"
        write_xlsx_rows(path, [list(FIELDS), *([r[f] for f in FIELDS] for r in catalog.rows)])
        return path.read_bytes(), None


def gz_export(catalog: Catalog) -> Export:
    return gzip.compress(csv_export(catalog)[0]), None


def zip_export(catalog: Catalog) -> Export:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("catalog.jsonl", jsonl_export(catalog)[0])
    return out.getvalue(), None


@dataclass(frozen=True)
class Format:
    name: str
    file: str
    export: Callable[[Catalog], Export]
    source: dict[str, Any]
    fields: dict[str, Any]


_PLAIN = {"sku": "sku", "name": "name", "price": "price"}
BMECAT_FIELDS = {
    "sku": "SUPPLIER_AID",
    "name": {"path": "ARTICLE_DETAILS.DESCRIPTION_SHORT"},
    "price": {
        "path": "ARTICLE_PRICE_DETAILS.ARTICLE_PRICE[?\"@price_type\"=='net_list']"
        ".PRICE_AMOUNT | [0]"
    },
}
FORMATS = [
    Format("csv", "catalog.csv", csv_export, {"type": "csv"}, _PLAIN),
    Format(
        "csv-semicolon-crlf",
        "catalog.csv",
        lambda c: csv_export(c, delimiter=";", newline="\r\n"),
        {"type": "csv", "delimiter": ";"},
        _PLAIN,
    ),
    Format("jsonl", "catalog.jsonl", jsonl_export, {"type": "jsonl"}, _PLAIN),
    Format("xlsx", "catalog.xlsx", xlsx_export, {"type": "xlsx"}, _PLAIN),
    Format("xml", "catalog.xml", xml_export, {"type": "xml", "record": "product"}, _PLAIN),
    Format(
        "bmecat", "bmecat.xml", bmecat_export, {"type": "xml", "record": "ARTICLE"}, BMECAT_FIELDS
    ),
    Format("gz", "catalog.csv.gz", gz_export, {"type": "csv"}, _PLAIN),
    Format("zip", "catalog.jsonl.zip", zip_export, {"type": "jsonl"}, _PLAIN),
]


def _cut(data: bytes, ends: list[int] | None, draw: st.DataObject) -> int:
    """A cut strictly inside a record (line formats) or anywhere short of the end.

    Half the time, one of the cuts a uniform draw rarely hits, where a reader is most
    easily fooled: just after a line break inside a record (a quoted description),
    between a record's CR and LF, just before its last line break.
    """
    if ends is None:  # a cut of trailing whitespace alone leaves the document whole
        return draw.draw(st.integers(1, len(data.rstrip()) - 1), label="cut")
    bounds = set(ends)
    inside = [c for c in range(1, len(data)) if c not in bounds]
    edges = [c for c in inside if data[c - 1 : c] in (b"\n", b"\r") or c + 1 in bounds]
    if draw.draw(st.booleans(), label="at an edge"):
        return draw.draw(st.sampled_from(edges), label="cut")
    return draw.draw(st.sampled_from(inside), label="cut")


# -- the sync ----------------------------------------------------------------------------
def _settings(folder: Path, source: dict[str, Any], fields: dict[str, Any], **extra: Any) -> Any:
    return settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k-test"},
            "source": source,
            "mapping": {"key": "sku", "fields": fields},
            "gone": {"action": "patch", "patch": PATCH},
            "safety": {"max_gone_ratio": 1.0, "max_change_ratio": 1.0},
            "state": {"path": str(folder / "state.db")},
            **extra,
        }
    )


def _sync(settings: Any, remote: FakeRemote) -> int:
    try:
        return run_once(settings, adapters=Adapters(client=remote)).exit_code
    except errors.SkuferryError as exc:
        return exc.exit_code


def _assert_whole(remote: FakeRemote, wholes: list[dict[str, dict[str, str]]]) -> None:
    for product in remote.products.values():
        assert product.get("status") != "archived", f"archived: {product}"
        key = str(product["sku"])
        for name, value in product.items():
            if name in ("id", "status"):
                continue
            allowed = {whole[key][name] for whole in wholes if key in whole}
            assert value in allowed, f"{key}.{name} = {value!r} is in no whole export"


def _by_key(catalog: Catalog, fields: tuple[str, ...] = FIELDS) -> dict[str, dict[str, str]]:
    return {r["sku"]: {f: r[f] for f in fields} for r in catalog.rows}


@pytest.mark.parametrize("fmt", FORMATS, ids=[f.name for f in FORMATS])
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(versions=catalogs(), draw=st.data())
def test_a_torn_export_changes_nothing(
    fmt: Format, versions: tuple[Catalog, Catalog], draw: st.DataObject
) -> None:
    first, second = versions
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        path = folder / fmt.file
        settings_ = _settings(folder, {**fmt.source, "path": str(path)}, fmt.fields)
        remote = FakeRemote()
        path.write_bytes(fmt.export(first)[0])
        assert _sync(settings_, remote) == 0
        assert len(remote.products) == len(first.rows)
        data, ends = fmt.export(second)
        path.write_bytes(data[: _cut(data, ends, draw)])
        code = _sync(settings_, remote)
        _assert_whole(remote, [_by_key(first), _by_key(second)])
        assert len(remote.products) == len(first.rows)
        assert code != 0, "a cut export synced with exit 0"


@pytest.mark.parametrize("fmt", FORMATS[:3], ids=[f.name for f in FORMATS[:3]])
def test_an_empty_export_is_refused(fmt: Format, tmp_path: Path) -> None:
    path = tmp_path / fmt.file
    catalog = Catalog([{"sku": "A-1", "name": "Anvil", "price": "1.00", "text": ""}])
    settings_ = _settings(tmp_path, {**fmt.source, "path": str(path)}, fmt.fields)
    remote = FakeRemote()
    path.write_bytes(fmt.export(catalog)[0])
    assert _sync(settings_, remote) == 0
    path.write_bytes(b"")
    assert _sync(settings_, remote) == errors.EXIT_USAGE  # EmptySourceRefused
    _assert_whole(remote, [_by_key(catalog)])


# -- [[join]] partners ---------------------------------------------------------------------
def _partner_csv(rows: list[dict[str, str]]) -> Export:
    return csv_export(Catalog([{"sku": r["sku"], "text": r["name"]} for r in rows]))


def _partner_jsonl(rows: list[dict[str, str]]) -> Export:
    return jsonl_export(Catalog([{"sku": r["sku"], "text": r["name"]} for r in rows]))


PARTNERS = {"csv": _partner_csv, "jsonl": _partner_jsonl}


@pytest.mark.parametrize("kind", sorted(PARTNERS))
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(versions=catalogs(), draw=st.data())
def test_a_torn_join_partner_changes_nothing(
    kind: str, versions: tuple[Catalog, Catalog], draw: st.DataObject
) -> None:
    first, second = versions
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        primary = folder / "catalog.jsonl"
        partner = folder / f"pim.{kind}"
        join = {"name": "pim", "type": kind, "path": str(partner), "key": "sku", "on": "sku"}
        fields = {**_PLAIN, "text": {"path": "pim.text", "default": "-"}}
        settings_ = _settings(folder, {"type": "jsonl", "path": str(primary)}, fields, join=[join])
        remote = FakeRemote()
        primary.write_bytes(jsonl_export(first)[0])
        partner.write_bytes(PARTNERS[kind](first.rows)[0])
        assert _sync(settings_, remote) == 0
        data, ends = PARTNERS[kind](second.rows)
        partner.write_bytes(data[: _cut(data, ends, draw)])
        code = _sync(settings_, remote)
        # the partner's text is the product's name of either whole partner export
        texts = {r["sku"]: {r["name"]} for r in first.rows}
        for r in second.rows:
            texts[r["sku"]].add(r["name"])
        for product in remote.products.values():
            assert product.get("status") != "archived", f"archived: {product}"
            key = str(product["sku"])
            assert product["text"] in texts[key], f"{key}.text = {product['text']!r}"
            assert {f: product[f] for f in FIELDS} == _by_key(first)[key]
        assert code != 0, "a cut join partner synced with exit 0"
