"""What answers at a URL (an export file, a JSON API, an HTML page) and how sure; a remote
file's start cut at its last whole record; the taker that stops at the sample's size."""

from __future__ import annotations

import codecs
import csv
import gzip
import io
import zipfile
from pathlib import Path
from xml.dom import minidom

import pytest

from skuferry.discover import cut, framing, remote
from skuferry.errors import SourceError

XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
GZ = gzip.compress(b"sku;name\n1;a\n")


# (name, Content-Type, first bytes, packed) -> (what answered, how sure)
CASES = [
    # the name, the type and the bytes agree: sure
    (("products.csv.gz", "application/gzip", GZ[:4], "gzip"), ("file", "sure")),
    (("Sortiment.xlsx", XLSX, b"PK\x03\x04", "zip"), ("file", "sure")),
    (("Artikel.csv", "text/csv; charset=utf-8", b"sku;name\r\n", "plain"), ("file", "sure")),
    (("bmecat.xml", "text/xml", b'<?xml version="1.0"?><BMECAT>', "plain"), ("file", "sure")),
    (("products", "application/json", b'{"items": [{"a": 1}]}', "plain"), ("api", "sure")),
    (("products", "application/hal+json", b'{"_embedded": {}}', "plain"), ("api", "sure")),
    (("feed", "application/x-ndjson", b'{"a": 1}\n{"a": 2}\n', "plain"), ("file", "sure")),
    # one object on its one line: the JSON Lines name (or type) makes it a file
    (("feed.jsonl", None, b'{"sku": "a"}\n', "plain"), ("file", "sure")),
    # nothing but the bytes says: likely
    (("export", "application/octet-stream", b"sku;name\n1;a\n", "plain"), ("file", "likely")),
    (("api", None, b'[{"sku": "a"}]', "plain"), ("api", "likely")),
    (("download", None, GZ[:4], "gzip"), ("file", "likely")),
    # JSON Lines served as application/json: the bytes decide, the name agrees
    (("feed.jsonl", "application/json", b'{"a": 1}\n{"a": 2}\n', "plain"), ("file", "likely")),
    # the bytes against everything else: said, unsure
    (("products", "application/json", b"sku;name\n1;a\n", "plain"), ("file", "unsure")),
    (("export.csv", "text/csv", b'{"items": [{"a": 1}]}', "plain"), ("api", "unsure")),
    # a page in place of a file (a sign-in page)
    (("products.csv", "text/html", b"<!DOCTYPE html><html>", "plain"), ("page", "likely")),
    (("login", "text/html; charset=utf-8", b"\n<html lang=de>", "plain"), ("page", "sure")),
]


@pytest.mark.parametrize(("given", "expected"), CASES)
def test_what_answers_at_a_url(
    given: tuple[str, str | None, bytes, str], expected: tuple[str, str]
) -> None:
    name, content_type, head, packed = given
    kind, finding = framing.served_as(name, content_type, head, packed=packed)
    assert (kind, finding.sure) == expected, finding.why
    assert finding.subject == "served as"


def test_the_why_names_what_disagrees() -> None:
    _, finding = framing.served_as("products.csv", "application/json", b"[]", packed="plain")
    assert "its name 'products.csv' says an export file" in finding.why
    assert "one JSON document" in finding.why


# --- the cut ----------------------------------------------------------------------------


def _csv(rows: list[list[str]]) -> bytes:
    out = io.StringIO()
    csv.writer(out, delimiter=";", lineterminator="\r\n").writerows(rows)
    return out.getvalue().encode("utf-8")


def test_a_csv_is_cut_after_its_last_whole_record_outside_quotes() -> None:
    whole = _csv([["sku", "text"], ["1", 'a "b"\r\nc;d'], ["2", "line\nbreak"], ["3", "e"]])
    for end in range(len(whole)):
        kept = cut.csv_records(whole[:end])
        rows = list(csv.reader(io.StringIO(kept.decode(), newline=""), delimiter=";"))
        assert kept == whole[: len(kept)] and (not kept or kept.endswith((b"\n", b"\r")))
        assert all(len(row) == 2 for row in rows), (end, rows)  # never half a record
    assert cut.csv_records(whole) == whole


def test_a_utf16_csv_is_cut_as_text() -> None:
    text = "sku\tname\r\n1\tÄpfel\r\n2\tBirnen\r\n"
    data = codecs.BOM_UTF16_LE + text.encode("utf-16-le")
    kept = cut.csv_records(data[:-7])
    assert kept.startswith(codecs.BOM_UTF16_LE)
    assert kept[2:].decode("utf-16-le") == "sku\tname\r\n1\tÄpfel\r\n"


def test_json_lines_are_cut_at_the_last_line_break() -> None:
    assert cut.lines(b'{"a": 1}\n{"a": 2}\n{"a"') == b'{"a": 1}\n{"a": 2}\n'
    assert cut.lines(b'{"a"') == b""


def test_xml_is_cut_after_its_last_whole_record_and_its_ancestors_closed() -> None:
    articles = "".join(
        f"<bme:ARTICLE><bme:SUPPLIER_AID>{i}</bme:SUPPLIER_AID><X/></bme:ARTICLE>" for i in range(5)
    )
    whole = (
        '<?xml version="1.0"?><bme:BMECAT xmlns:bme="urn:x"><bme:T_NEW_CATALOG>'
        f"{articles}</bme:T_NEW_CATALOG></bme:BMECAT>"
    ).encode()
    at = whole.index(b"<bme:SUPPLIER_AID>3")
    kept = cut.xml_records(whole[:at], "ARTICLE")
    assert kept.endswith(b"</bme:ARTICLE></bme:T_NEW_CATALOG></bme:BMECAT>\n")
    assert kept.count(b"</bme:ARTICLE>") == 3
    minidom.parseString(kept)  # noqa: S318 - our own bytes: it parses, so it is whole
    assert cut.xml_records(b"<a><b>", "ARTICLE") == b"<a><b>"  # no whole record: as it is


# --- the taker ----------------------------------------------------------------------------


def _take(chunks: list[bytes], spill: Path) -> tuple[remote._Taker, int]:
    """The taker after ``chunks`` (until it had enough), and how many it was handed."""
    fed = 0
    with spill.open("wb") as out:
        taker = remote._Taker(out)
        for chunk in chunks:
            fed += 1
            if not taker(chunk):
                break
    return taker, fed


def _pieces(data: bytes, size: int = 1 << 16) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def test_the_taker_gunzips_only_as_far_as_the_sample_reaches(tmp_path: Path) -> None:
    text = b"".join(b"K%07d;Artikel %d;12,50\n" % (i, i) for i in range(600_000))
    packed = gzip.compress(text)
    pieces = _pieces(packed)
    taker, fed = _take(pieces, tmp_path / "spill")
    assert taker.packed == "gzip" and taker.enough and not taker.zipped
    assert len(taker.content) == remote.CONTENT_BYTES  # never more than it keeps
    assert bytes(taker.content) == text[: remote.CONTENT_BYTES]
    assert fed < len(pieces) // 2, (fed, len(pieces))  # the rest never taken


def test_the_taker_reads_a_zip_whole_up_to_its_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("Artikel.csv", b"sku;name\n" + b"1;a\n" * 50_000)
    data = archive.getvalue()
    taker, _ = _take(_pieces(data, 4096), tmp_path / "spill")
    assert taker.zipped and not taker.enough and (tmp_path / "spill").read_bytes() == data
    monkeypatch.setattr(remote, "WHOLE_BYTES", len(data) // 2)
    taker, _ = _take(_pieces(data, 4096), tmp_path / "spill2")
    assert taker.over and taker.enough


def test_the_taker_refuses_what_is_not_gzip_after_a_gzip_start(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="gzip"):
        _take([gzip.compress(b"x")[:10] + b"\x00" * 64], tmp_path / "spill")


def test_a_stray_quote_in_an_unquoted_cell_does_not_swallow_the_sample() -> None:
    rows = ["sku;name", '1;Monitor 24" matt', *(f"{i};Kabel {i}" for i in range(2, 50)), "50;Ka"]
    text = "\n".join(rows)
    kept = cut.csv_text(text)
    assert kept == "\n".join(rows[:-1]) + "\n"  # the last line break, not the one before 24"


def test_the_framing_of_a_sample_cut_inside_a_quoted_cell_of_many_lines() -> None:
    cell = "Stahl;\r\ngeschliffen;\r\n" * 50
    rows = "".join(f'{i};Bohrer {i};"{cell}Ende";{i},50\r\n' for i in range(40))
    text = "Artikelnummer;Bezeichnung;Langtext;Preis\r\n" + rows
    found = framing.dialect(text[: len(text) - 700], complete=False)  # cut inside a cell
    assert found.delimiter == ";"
