"""The pure detections of ``init``: framing, values, names, the key, the fields."""

from __future__ import annotations

import codecs
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skuferry.discover import framing
from skuferry.discover import values as v
from skuferry.discover.columns import columns, jmespath_of, meaning
from skuferry.discover.fields import decimal_hint, fit, propose, refusals
from skuferry.discover.key import candidates, question
from skuferry.discover.model import Column
from skuferry.discover.words import KEY, name_score, plain
from skuferry.sources import encodings

# --- encoding -------------------------------------------------------------------------


def test_a_bom_is_sure() -> None:
    name, found, _ = framing.encoding(codecs.BOM_UTF8 + b"a;b\r\n", complete=True)
    assert (name, found.sure) == ("utf-8", "sure")


def test_valid_utf8_with_umlauts_is_sure_and_ascii_only_likely() -> None:
    assert framing.encoding("Größe;Preis\n".encode(), complete=True)[1].sure == "sure"
    assert framing.encoding(b"size;price\n", complete=True)[1].sure == "likely"


def test_cp1252_is_named_by_the_byte_that_is_not_utf8() -> None:
    name, found, _ = framing.encoding("Référence;Prix\n".encode("cp1252"), complete=True)
    assert name == "cp1252" and found.sure == "likely"
    assert "0xE9" in found.why and "'é'" in found.why


def test_a_sample_cut_inside_a_character_is_still_utf8() -> None:
    head = "Maß;Preis\n".encode()[:3]  # 'M', 'a', half of 'ß'
    assert framing.encoding(head, complete=False)[0] == "utf-8"


def test_utf8_read_as_cp1252_and_saved_again_is_said() -> None:
    twice = "Größe".encode().decode("cp1252").encode()
    _, _, notes = framing.encoding(twice, complete=True)
    assert notes and "double-encoded" in notes[0]


_LINES = st.lists(
    st.tuples(
        st.text(st.sampled_from("abc;,1 äöüßéèçñ€Ã"), max_size=12),
        st.sampled_from(["utf-8", "cp1252"]),
    ),
    min_size=1,
    max_size=6,
)


@given(lines=_LINES, bom=st.booleans(), cut=st.integers(min_value=0, max_value=3))
def test_init_proposes_the_encoding_the_source_reads_by(
    lines: list[tuple[str, str]], bom: bool, cut: int
) -> None:
    """One decision: init's encoding is ``encodings.detect``'s (what ``encoding = "auto"``
    reads), in its own words; only a byte no cp1252 reads makes it say latin-1."""
    data = b"".join(text.encode(enc) + b"\n" for text, enc in lines)
    data = (codecs.BOM_UTF8 if bom else b"") + data[: len(data) - cut]
    complete = cut == 0
    name, found, _ = framing.encoding(data, complete=complete)
    decided = encodings.detect(data, whole=complete).encoding
    expected = {"utf-8-sig": "utf-8"}.get(decided, decided)
    assert name == expected or (name, found.sure) == ("latin-1", "unsure")


# --- delimiter, quoting, header ---------------------------------------------------------


def test_the_semicolon_wins_over_decimal_commas() -> None:
    text = "Art;Preis;Bestand\r\n1;12,50;3\r\n2;1.234,50;4\r\n"
    found = framing.dialect(text, complete=True)
    assert found.delimiter == ";"
    assert found.findings[0].sure == "sure"
    assert any(f.subject == "line ends" and "CRLF" in f.value for f in found.findings)


def test_quoted_cells_with_delimiters_and_line_breaks_are_named() -> None:
    text = 'sku,description\nA,"one, two"\nB,"line\nbreak"\nC,"say ""hi"""\n'
    found = framing.dialect(text, complete=True)
    quoting = next(f for f in found.findings if f.subject == "quoting")
    assert "delimiters" in quoting.why and "line breaks" in quoting.why
    assert "doubled quotes" in quoting.why


def test_a_tab_separated_file() -> None:
    assert framing.dialect("a\tb\tc\n1\t2\t3\n", complete=True).delimiter == "\t"


def test_a_missing_final_line_break_is_seen_only_in_a_whole_file() -> None:
    assert not framing.dialect("a;b\n1;2", complete=True).final_newline
    assert framing.dialect("a;b\n1;2", complete=False).final_newline


def test_lines_above_the_header_are_said() -> None:
    found = framing.dialect("Export vom 1.11.\nsku;name;price\nA;x;1\nB;y;2\n", complete=True)
    assert found.header_line == 2
    assert any("remove the lines above" in n for n in found.notes)


def test_header_problems() -> None:
    said = framing.header_problems(["sku", "", "name", "name"])
    assert any("empty" in p for p in said) and any("'name'" in p for p in said)


# --- sheets, XML, JSON ---------------------------------------------------------------------


def test_the_sheet_with_the_data_and_its_header_below_a_title() -> None:
    rows: list[list[Any]] = [
        ["Preisliste 2026"], [], ["Art.-Nr.", "Name", "Preis"], ["1", "a", 1.5], ["2", "b", 2]
    ]  # fmt: skip
    help_rows: list[list[Any]] = [["Bitte nur Spalte C ändern"]]
    found = framing.sheet_table([("Hilfe", help_rows), ("Daten", rows)])
    assert found is not None
    assert (found.sheet, found.position, found.header_row) == ("Daten", 2, 3)
    assert "Preisliste 2026" in found.findings[1].why


def test_the_record_element_is_the_shallowest_that_repeats() -> None:
    stats = {
        ("BMECAT",): framing.ElementStats(1, 1),
        ("BMECAT", "HEADER"): framing.ElementStats(1, 1),
        ("BMECAT", "T_NEW_CATALOG"): framing.ElementStats(1, 1),
        ("BMECAT", "T_NEW_CATALOG", "ARTICLE"): framing.ElementStats(40, 40),
        ("BMECAT", "T_NEW_CATALOG", "ARTICLE", "ARTICLE_FEATURES", "FEATURE"): (
            framing.ElementStats(120, 120)
        ),
    }  # fmt: skip
    name, found = framing.record_element(stats) or ("", None)
    assert name == "ARTICLE" and found is not None and found.sure == "sure"


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ([{"sku": "a"}, {"sku": "b"}], ""),
        ({"_embedded": {"items": [{"a": 1}]}, "_links": {}}, "_embedded.items"),
        ({"value": [{"a": 1}, {"a": 2}], "@odata.nextLink": "https://x/2"}, "value"),
        ({"data": {"products": {"edges": [{"node": {"a": 1}}]}}}, "data.products.edges[].node"),
    ],
)
def test_where_a_json_answer_holds_its_records(body: object, path: str) -> None:
    found = framing.records_path(body)
    assert found is not None and found[0] == path


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"items": [], "next": "http://x/?page=2"}, "next"),
        ({"_links": {"next": {"href": "/p?page=2"}}}, "_links.next.href"),
        ({"value": [], "@odata.nextLink": "https://x/2"}, '"@odata.nextLink"'),
        ({"meta": {"nextPage": "?cursor=abc"}}, "meta.nextPage"),
    ],
)
def test_the_next_link(body: object, path: str) -> None:
    found = framing.next_link(body)
    assert found is not None and found[0] == path


def test_no_next_link_and_the_totals() -> None:
    assert framing.next_link({"items": [], "page": 1}) is None
    assert framing.totals({"items": [], "meta": {"total": 45, "pages": 3}}) == {
        "total_path": "meta.total",
        "total_pages_path": "meta.pages",
    }


@pytest.mark.parametrize(
    ("name", "head", "found"),
    [
        ("a.csv", b"x;y\n", "csv"),
        ("feed.json", b'{"a": 1}\n{"a": 2}\n', "jsonl"),
        ("dump.json", b'[{"a": 1}]', "json"),
        ("export", b"\xef\xbb\xbf<?xml version='1.0'?><a/>", "xml"),
        ("data.txt", b"a\tb\n", "csv"),
    ],
)
def test_the_format(name: str, head: bytes, found: str) -> None:
    assert framing.format_of(name, head)[0] == found


# --- values ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "style"),
    [
        (["1.234,50", "12,90"], (",", ".")),
        (["12,50", "3,00"], (",", None)),
        (["1\u00a0234,50", "12,50"], (",", " ")),
        (["1,234.50", "12.90"], (".", ",")),
        (["19.90", "5"], (".", None)),
        (["1'234.50", "9.95"], (".", "'")),
    ],
)
def test_number_styles(values: list[str], style: tuple[str, str | None]) -> None:
    found = v.numbers(values)
    assert found is not None and (found.decimal, found.thousands) == style


def test_a_number_two_styles_read_differently_is_decided_by_the_file_or_said() -> None:
    by_file = v.numbers(["1.234", "2.500"], hint=",")
    assert by_file is not None and by_file.thousands == "." and by_file.sure
    unknown = v.numbers(["1.234", "2.500"])
    assert unknown is not None and not unknown.sure and unknown.ambiguous


def test_a_few_values_that_are_no_numbers_are_outliers() -> None:
    found = v.numbers(["12,50"] * 19 + ["a. A."])
    assert found is not None and found.outliers == ("a. A.",)
    assert v.numbers(["red", "blue", "12"]) is None


def test_whole_numbers_written_with_zeros() -> None:
    found = v.numbers(["25.0000", "3.0000"])
    assert found is not None and found.zeros and not found.fraction


@pytest.mark.parametrize(
    ("values", "fmt", "zone"),
    [
        (["2026-11-26 04:13:17", "2026-11-25 10:00:00"], "%Y-%m-%d %H:%M", False),
        (["2026-11-26T04:13:17+02:00"], "%Y-%m-%d %H:%M", True),
        (["26.11.2026"], "%d.%m.%Y", False),
        (["13/02/2026", "01/03/2026"], "%d/%m/%Y", False),
    ],
)
def test_dates(values: list[str], fmt: str, zone: bool) -> None:
    found = v.dates(values)
    assert found is not None and found.format == fmt and found.zone == zone


def test_day_and_month_that_cannot_be_told_apart() -> None:
    found = v.dates(["03/04/2026", "05/06/2026"])
    assert found is not None and not found.sure


def test_gtins() -> None:
    found = v.gtins(["4006381333931", "'0850064060010", "4.00638E+12", "4006381333932"])
    assert (found.valid, found.apostrophe) == (2, 1)
    assert found.mangled == ("4.00638E+12",) and found.invalid == ("4006381333932",)


# --- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "plain_form"),
    [("Art.-Nr.", "art nr"), ("ItemNo", "item no"), ("Référence", "reference"),
     ("SUPPLIER_AID", "supplier aid"), ("VK-Preis", "vk preis")],
)  # fmt: skip
def test_plain(name: str, plain_form: str) -> None:
    assert plain(name) == plain_form


@pytest.mark.parametrize(
    "name",
    ["sku", "SKU", "Artikelnummer", "Art.-Nr.", "ItemNo", "reference", "Référence", "código",
     "Codice articolo", "artikelnummer", "Artikelcode", "SUPPLIER_AID"],
)  # fmt: skip
def test_article_numbers_in_six_languages(name: str) -> None:
    assert name_score(KEY, name) >= 2


@pytest.mark.parametrize(
    ("target", "name"),
    [("price", "Verkaufspreis"), ("price", "Prix TTC"), ("price", "Precio"), ("price", "Prezzo"),
     ("price", "Prijs"), ("stock", "Lagerbestand"), ("stock", "Quantité"), ("stock", "Existencias"),
     ("stock", "Giacenza"), ("stock", "Voorraad"), ("name", "Bezeichnung"), ("name", "Désignation"),
     ("name", "Nombre"), ("name", "Naam"), ("brand", "Hersteller"), ("brand", "Marque"),
     ("category", "Warengruppe"), ("weight", "Poids"), ("ean", "Code EAN"),
     ("image_url", "Bild-URL"), ("description", "Beschrijving")],
)  # fmt: skip
def test_field_names(target: str, name: str) -> None:
    assert name_score(target, name) >= 2


@pytest.mark.parametrize(
    ("target", "name"),
    [("price", "EK-Preis"), ("price", "Einkaufspreis"), ("price", "Compare at price"),
     ("stock", "Mindestbestand"), ("stock", "Lagerort"), ("description", "Kurzbeschreibung")],
)  # fmt: skip
def test_names_that_mean_something_else(target: str, name: str) -> None:
    assert name_score(target, name) <= 0


# --- columns, the key, the fields -------------------------------------------------------------


def test_nested_records_become_paths_and_xml_lists_read_either_way() -> None:
    records: list[dict[str, Any]] = [
        {"id": "1", "PRICE": {"AMOUNT": "1.00"}},
        {"id": "2", "PRICE": [{"AMOUNT": "2.00"}, {"AMOUNT": "3.00"}]},
    ]
    found = {c.name: c for c in columns(records)}
    price = found["PRICE[0].AMOUNT"]
    assert price.path == "[PRICE][] | [0].AMOUNT"
    assert price.values == ("1.00", "2.00")
    assert found["id"].path is None


def test_a_leafs_meaning_skips_generic_members() -> None:
    akeneo = Column("values.name[0].data", "values.name[0].data", ())
    assert meaning(akeneo) == "name"
    assert jmespath_of(("a", "b c"), {}) == 'a."b c"'


def test_the_key_prefers_an_article_number_and_names_the_runner_up() -> None:
    cols = [
        Column("ID", None, ("1", "2", "3")),
        Column("Artikelnummer", None, ("000123", "000124", "000125")),
        Column("Name", None, ("Drill one", "Saw two", "Level three")),
        Column("Preis", None, ("1,50", "2,50", "3,50")),
    ]
    found, said = candidates(cols, 3)
    assert [c.column.name for c in found[:2]] == ["Artikelnummer", "ID"]
    assert "leading zeros" in found[0].why
    assert "Preis" not in [c.column.name for c in found]  # a fraction: a price, not a key
    assert question(found) is None and said == []


def test_two_keys_alike_are_a_question_and_a_named_key_that_fails_is_said() -> None:
    cols = [
        Column("SKU", None, ("A", "B")),
        Column("Artikelnummer", None, ("1", "2")),
        Column("Referenz", None, ("X", "X")),
    ]
    found, said = candidates(cols, 2)
    asked = question(found)
    assert asked is not None and asked.topic == "key" and len(asked.options) == 2
    assert said and "'Referenz'" in said[0] and "not unique" in said[0]


def test_fields_by_name_and_content_typed_in_the_files_style() -> None:
    cols = [
        Column("Art.-Nr.", None, ("1", "2", "3")),
        Column("VK-Preis", None, ("1.234,50", "12,90", "3,00")),
        Column("Bestand", None, ("1.200", "35", "0")),
        Column("Code", None, ("4006381333931", "4012345000016", "4012345000023")),
        Column("Pic", None, ("https://x/a.jpg", "https://x/b.png", "https://x/c.jpg")),
        Column("Menge pro VE", None, ("6", "12", "24")),
    ]
    hint = decimal_hint(cols, delimiter=";")
    found = propose(cols, key=cols[0], hint=hint, count=3)
    specs = {c.target: c.spec for c in found.choices}
    assert specs["price"] == {
        "column": "VK-Preis",
        "type": "decimal",
        "decimal": ",",
        "thousands": ".",
    }
    assert specs["stock"] == {"column": "Bestand", "type": "integer", "thousands": "."}
    assert specs["ean"] == {"column": "Code", "check": "gtin"}  # by its values
    assert specs["image_url"] == {"column": "Pic"}
    assert "Menge pro VE" not in found.used


def test_a_named_price_column_of_a_small_sample_keeps_its_type_beside_a_bad_value() -> None:
    """One "x" among four prices must not leave the prices out of the config (its row is
    refused instead); a column named so but mostly text is still left out."""
    cols = [
        Column("Artikelnummer", None, ("000101", "000102", "000103", "000104")),
        Column("VK-Preis", None, ("1.234,50", "12,90", "29,00", "x")),
        Column("Bestand", None, ("5", "0", "3", "auf Anfrage")),
        Column("Preis alt", None, ("siehe Liste", "12,90", "-", "n/a")),
    ]
    found = propose(cols, key=cols[0], hint=decimal_hint(cols, delimiter=";"), count=4)
    specs = {c.target: c.spec for c in found.choices}
    assert specs["price"] == {
        "column": "VK-Preis",
        "type": "decimal",
        "decimal": ",",
        "thousands": ".",
    }
    assert specs["stock"] == {"column": "Bestand", "type": "integer"}
    assert "Preis alt" not in found.used
    notes = " ".join(found.notes)
    assert "'x' is no number written like the others: its row is refused" in notes
    # Half is not most: a name alone never makes a column of text a price.
    assert v.numbers(["12,90", "n/a"], mostly=v.MOSTLY_NAMED) is None
    assert v.numbers(["12,90", "13,90", "n/a"], mostly=v.MOSTLY_NAMED) is not None
    assert v.numbers(["12,90", "13,90", "n/a"]) is None  # unnamed: nine in ten


def test_numbers_named_like_nothing_are_asked_not_guessed() -> None:
    cols = [Column("sku", None, ("a", "b")), Column("Wert", None, ("12", "30"))]
    found = propose(cols, key=cols[0], hint=None, count=2)
    asked = [q for q in found.questions if q.topic == "column:Wert"]
    assert asked and asked[0].chosen is None
    assert {label for label, _ in asked[0].options} == {"price", "stock", "none"}
    assert not found.choices


def test_refusals_are_the_mappers() -> None:
    column = Column("EAN", None, ("4006381333931", "4012345000016", "4012345000023",
                                  "4012345000030", "4006381333932"))  # fmt: skip
    found = refusals(column, {"column": "EAN", "check": "gtin"})
    assert found == [("4006381333932", "'4006381333932' is not a GTIN (wrong check digit)")]
    fitted = fit("ean", column, hint=None)
    assert fitted is not None and fitted.spec == {"check": "gtin"}
