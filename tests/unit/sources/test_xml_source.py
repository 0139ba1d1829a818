"""The xml source: the shared contract, BMEcat as suppliers send it, and hostile files refused."""

from __future__ import annotations

import gzip
import zipfile
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import pytest

from skuferry.config.load import settings_from_dict
from skuferry.config.schema import MappingSettings
from skuferry.errors import SourceError
from skuferry.models import BadRecord, Product, RawRecord
from skuferry.sandbox.catalog_files import bmecat, bmecat_article
from skuferry.sources.base import Source
from skuferry.sources.dispatch import open_source
from skuferry.sources.xml import XmlSource
from skuferry.sync.map.mapper import Mapper
from tests.source_contract import GOOD, SourceContract


def _product(record: dict[str, Any], *, extra: str = "") -> str:
    return (
        f"  <product><sku>{escape(record['sku'])}</sku><name>{escape(record['name'])}</name>"
        f"<price>{record['price']}</price>{extra}</product>\n"
    )


def _write(path: Path, products: Iterator[str] | list[str]) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        handle.write('<?xml version="1.0" encoding="UTF-8"?>\n<catalog>\n')
        handle.writelines(products)
        handle.write("</catalog>\n")
    return path


def _read(source: Source) -> list[RawRecord]:
    out = list(source.records())
    assert all(isinstance(r, RawRecord) for r in out), out
    return [r for r in out if isinstance(r, RawRecord)]


class TestXmlContract(SourceContract):
    def make_source(self, tmp_path: Path, records: list[dict[str, Any]]) -> Source:
        return XmlSource(
            _write(tmp_path / "p.xml", [_product(r) for r in records]), record="product"
        )

    def make_source_with_bad_record(self, tmp_path: Path) -> tuple[Source, int]:
        huge = {"sku": "X-9", "name": "Huge", "price": "1"}
        products = [
            *(_product(r) for r in GOOD[:2]),
            _product(huge, extra=f"<long>{'x' * 5000}</long>"),
            _product(GOOD[2]),
        ]
        return XmlSource(
            _write(tmp_path / "p.xml", products), record="product", max_record_bytes=2000
        ), 1

    def make_unreachable_source(self, tmp_path: Path) -> tuple[Source, str]:
        path = tmp_path / "nowhere" / "p.xml"
        return XmlSource(path, record="product"), str(path)

    def make_large_source(self, tmp_path: Path, n: int) -> Source:
        rows = (
            _product({"sku": f"SKU-{i:06d}", "name": f"Name {i}", "price": "1.5"}) for i in range(n)
        )
        return XmlSource(_write(tmp_path / "large.xml", rows), record="product")


# -- BMEcat ------------------------------------------------------------------------------------


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    articles = [
        bmecat_article(
            "079685",
            "Akku-Bohrschrauber 18 V",
            ean="04596710520787",
            price="199.00",
            features=[("Spannung", "18 V"), ("Gewicht", "1,4 kg")],
            long="<p>Mit <b>2 Akkus</b></p><script>alert(1)</script>",
        ),
        bmecat_article(
            "100200", "Stichsäge 6,5°", ean="4006381333931", price="52", features=[("Hub", "26 mm")]
        ),
    ]
    path = tmp_path / "bmecat.xml"
    path.write_text(bmecat(articles), encoding="utf-8")
    return path


def test_bmecat_articles_become_nested_records(catalog: Path) -> None:
    first, second = _read(XmlSource(catalog, record="ARTICLE"))

    assert first.line == 13, "the line of the <ARTICLE> start tag"
    assert second.line > first.line
    article = first.fields
    assert article["@mode"] == "new"
    assert article["SUPPLIER_AID"] == "079685", "a key with a leading zero stays text"
    details = article["ARTICLE_DETAILS"]
    assert details["EAN"] == "04596710520787"
    assert details["DESCRIPTION_LONG"] == "<p>Mit <b>2 Akkus</b></p><script>alert(1)</script>"
    assert article["ARTICLE_FEATURES"]["FEATURE"] == [
        {"FNAME": "Spannung", "FVALUE": "18 V"},
        {"FNAME": "Gewicht", "FVALUE": "1,4 kg"},
    ], "repeated children become a list"
    assert second.fields["ARTICLE_FEATURES"]["FEATURE"] == {"FNAME": "Hub", "FVALUE": "26 mm"}
    prices = article["ARTICLE_PRICE_DETAILS"]["ARTICLE_PRICE"]
    assert prices[0] == {
        "@price_type": "net_list",
        "PRICE_AMOUNT": "199.00",
        "PRICE_CURRENCY": "EUR",
        "TAX": "0.19",
    }
    assert second.fields["ARTICLE_DETAILS"]["DESCRIPTION_SHORT"] == "Stichsäge 6,5°"


def test_text_beside_attributes_or_children_is_hash_text(tmp_path: Path) -> None:
    path = tmp_path / "p.xml"
    path.write_text(
        '<c><item id="7"><unit code="C62">piece</unit>loose<empty/><blank>  </blank></item></c>',
        encoding="utf-8",
    )
    (record,) = _read(XmlSource(path, record="item"))
    assert record.fields == {
        "@id": "7",
        "unit": {"@code": "C62", "#text": "piece"},
        "#text": "loose",
        "empty": None,
        "blank": None,
    }


def test_a_bmecat_maps_through_jmespath_paths_to_exact_values(catalog: Path) -> None:
    net = "ARTICLE_PRICE_DETAILS.ARTICLE_PRICE[?\"@price_type\"=='net_list'].PRICE_AMOUNT | [0]"
    mapping = MappingSettings.model_validate(
        {
            "key": "sku",
            "fields": {
                "sku": "SUPPLIER_AID",
                "name": {"path": "ARTICLE_DETAILS.DESCRIPTION_SHORT"},
                "ean": {"path": "ARTICLE_DETAILS.EAN"},
                "price": {"path": net, "type": "decimal"},
            },
        }
    )
    mapper = Mapper(mapping, source_name=catalog.name)
    products = [mapper.map(r) for r in _read(XmlSource(catalog, record="ARTICLE"))]
    assert all(isinstance(p, Product) for p in products), products
    first = products[0]
    assert isinstance(first, Product)
    assert first.payload == {
        "sku": "079685",
        "name": "Akku-Bohrschrauber 18 V",
        "ean": "04596710520787",
        "price": Decimal("199.00"),
    }


def test_opened_from_the_config(catalog: Path) -> None:
    settings = settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k" * 12},
            "source": {"type": "xml", "path": str(catalog), "record": "ARTICLE"},
            "state": {"path": str(catalog.parent / "s.db")},
        }
    )
    assert len(_read(open_source(settings.source))) == 2


def test_a_latin1_file_is_decoded_by_its_declaration(tmp_path: Path) -> None:
    path = tmp_path / "p.xml"
    text = bmecat([bmecat_article("0815", "Schraubendreher groß")], encoding="ISO-8859-1")
    path.write_bytes(text.encode("latin-1"))
    (record,) = _read(XmlSource(path, record="ARTICLE"))
    assert record.fields["ARTICLE_DETAILS"]["DESCRIPTION_SHORT"] == "Schraubendreher groß"


@pytest.mark.parametrize("wrap", ["gzip", "zip"])
def test_a_compressed_file_is_read_by_its_content_not_its_name(
    catalog: Path, tmp_path: Path, wrap: str
) -> None:
    packed = tmp_path / "catalog.dat"  # no telling suffix
    if wrap == "gzip":
        packed.write_bytes(gzip.compress(catalog.read_bytes()))
    else:
        with zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.write(catalog, "bmecat.xml")
    assert [r.fields["SUPPLIER_AID"] for r in _read(XmlSource(packed, record="ARTICLE"))] == [
        "079685",
        "100200",
    ]


def test_a_file_that_is_not_well_formed_fails_the_pull_naming_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.xml", [_product(GOOD[0]), "  <product><sku>B</product>\n"])
    with pytest.raises(SourceError, match=r"p\.xml line 4, column \d+: not well-formed XML"):
        list(XmlSource(path, record="product").records())


# -- hostile files -------------------------------------------------------------------------------

BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<catalog><product><sku>A</sku><name>&lol9;</name></product></catalog>
"""


def _refusal(tmp_path: Path, text: str) -> str:
    path = tmp_path / "hostile.xml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SourceError) as info:  # at the declaration, before any expansion
        list(XmlSource(path, record="product").records())
    return str(info.value)


def test_a_billion_laughs_file_is_refused_at_its_first_entity(tmp_path: Path) -> None:
    message = _refusal(tmp_path, BILLION_LAUGHS)
    assert "hostile.xml line 3: declares the entity 'lol'" in message
    assert "refused" in message


@pytest.mark.parametrize(
    "doctype",
    [
        '<!DOCTYPE catalog [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>',
        '<!DOCTYPE catalog [<!ENTITY % xxe SYSTEM "file:///etc/passwd"> %xxe;]>',
    ],
    ids=["general", "parameter"],
)
def test_an_external_entity_is_refused_and_the_file_never_read(
    tmp_path: Path, doctype: str
) -> None:
    text = f"{doctype}\n<catalog><product><sku>&xxe;</sku></product></catalog>"
    message = _refusal(tmp_path, text)
    assert "file:///etc/passwd" in message and "refused" in message
    assert "root:" not in message


def test_an_external_dtd_is_never_fetched(tmp_path: Path) -> None:
    # Port 9 (discard) on loopback: a fetch would fail or hang; parsing must not try.
    text = (
        '<!DOCTYPE catalog SYSTEM "http://127.0.0.1:9/catalog.dtd">\n'
        "<catalog><product><sku>A</sku></product></catalog>"
    )
    path = tmp_path / "p.xml"
    path.write_text(text, encoding="utf-8")
    assert [r.fields for r in _read(XmlSource(path, record="product"))] == [{"sku": "A"}]


def test_a_record_too_large_is_rejected_alone(tmp_path: Path) -> None:
    products = [_product(GOOD[0], extra=f"<d>{'y' * 10_000}</d>"), _product(GOOD[1])]
    out = list(
        XmlSource(
            _write(tmp_path / "p.xml", products), record="product", max_record_bytes=4096
        ).records()
    )
    assert isinstance(out[0], BadRecord) and "larger than 4,096 bytes" in out[0].reason
    assert isinstance(out[1], RawRecord) and out[1].fields["sku"] == "B-2"


def test_a_huge_tag_with_no_end_in_sight_fails_the_pull(tmp_path: Path) -> None:
    path = tmp_path / "p.xml"
    path.write_text(f'<catalog><product a="{"z" * 3_000_000}"/></catalog>', encoding="utf-8")
    with pytest.raises(SourceError, match="no element ends within 1,000,000 bytes"):
        list(XmlSource(path, record="product", max_record_bytes=1_000_000).records())


@pytest.mark.parametrize("cut", ["after a record", "inside a record"])
def test_a_truncated_file_fails_the_pull(tmp_path: Path, cut: str) -> None:
    # Nothing read before the cut may pass for the whole catalog (it would make the rest gone).
    whole = "".join(_product(p) for p in GOOD[:2])
    body = whole if cut == "after a record" else whole[: len(whole) - 12]
    path = tmp_path / "p.xml"
    path.write_text(f'<?xml version="1.0"?>\n<catalog>\n{body}', encoding="utf-8")
    with pytest.raises(SourceError, match=r"p\.xml line \d+, column \d+: not well-formed XML"):
        list(XmlSource(path, record="product").records())
