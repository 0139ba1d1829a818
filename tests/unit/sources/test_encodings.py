"""A text file's encoding on evidence (``sources.encodings``): what ``auto`` reads, and a
file declared single-byte whose bytes are UTF-8 refused, naming the line."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest

from skuferry.errors import ShapeChanged
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.csv import CsvSource
from skuferry.sources.encodings import (
    MAX_PEEK,
    EncodingRefused,
    decoded,
    detect,
    single_byte,
    utf8_evidence,
)

TEXT = "sku;name\n1;Kaffee\n2;Müller Kaffee\n3;Crème\n"


@pytest.mark.parametrize(
    ("data", "encoding", "why"),
    [
        (TEXT.encode("utf-8-sig"), "utf-8-sig", "byte-order mark"),
        (TEXT.encode("utf-16"), "utf-16", "UTF-16 byte-order mark"),
        (b"sku\n1\n", "utf-8", "ASCII only"),
        (TEXT.encode("utf-8"), "utf-8", "valid UTF-8"),
        (TEXT.encode("cp1252"), "cp1252", "not UTF-8 (byte 0xfc on line 3)"),
    ],
)
def test_detect_names_the_encoding_and_its_evidence(data: bytes, encoding: str, why: str) -> None:
    found = detect(data, whole=True)
    assert found.encoding == encoding and why in found.evidence


def test_one_bad_line_in_a_utf8_file_does_not_make_it_cp1252() -> None:
    data = TEXT.encode("utf-8") + "4;Caf\xe9\n".encode("cp1252")
    found = detect(data, whole=True)
    assert found.encoding == "utf-8" and found.invalid == 1 and found.utf8_line == 3


def test_a_cut_sample_ends_at_its_last_whole_line() -> None:
    data = TEXT.encode("utf-8")
    cut = data[: data.index("ü".encode()) + 1]  # in the middle of 'ü'
    assert detect(cut + b"\n", whole=True).encoding == "cp1252"
    assert detect(cut).encoding == "utf-8", "the torn last line is left out"


def test_a_one_line_sample_cut_inside_a_character_is_no_evidence_against_utf8() -> None:
    head = "Maß;Preis".encode()[:3]  # 'M', 'a', half of 'ß': no line break to cut at
    assert detect(head).encoding == "utf-8"
    assert detect("Größe;Maß".encode()[:-1]).encoding == "utf-8", "'ö' is whole: evidence"
    assert detect("Référence".encode("cp1252")[:4]).encoding == "cp1252", "0xE9 is no UTF-8"
    assert detect(head, whole=True).encoding == "cp1252", "a whole file ending so is not UTF-8"


def test_single_byte_encodings() -> None:
    assert single_byte("cp1252") and single_byte("latin-1") and single_byte("iso-8859-15")
    assert not single_byte("utf-8") and not single_byte("utf-16") and not single_byte("nope")
    assert utf8_evidence("Müller".encode()) and not utf8_evidence("Müller".encode("cp1252"))
    assert not utf8_evidence(b"plain")


def test_a_declared_cp1252_file_that_is_utf8_is_refused_naming_the_line() -> None:
    with pytest.raises(EncodingRefused) as caught:
        decoded(io.BytesIO(TEXT.encode("utf-8")), "cp1252", path="p.csv")
    assert str(caught.value).startswith("p.csv line 3: the file is declared 'cp1252'")
    assert "Ã¼" in str(caught.value) and isinstance(caught.value, ShapeChanged)


def test_a_declared_cp1252_file_that_is_cp1252_reads() -> None:
    lines, encoding = decoded(io.BytesIO(TEXT.encode("cp1252")), "cp1252", path="p.csv")
    assert "".join(lines) == TEXT and encoding == "cp1252"


def test_utf8_far_into_a_declared_cp1252_file_is_refused_at_its_line() -> None:
    head = "".join(f"{i:07d};plain text\n" for i in range(300_000)).encode()  # > MAX_PEEK
    assert len(head) > MAX_PEEK
    lines, _ = decoded(io.BytesIO(head + "x;Müller\n".encode()), "cp1252", path="p.csv")
    with pytest.raises(EncodingRefused, match=r"p\.csv line 300001:"):
        list(lines)


def test_auto_reads_what_the_bytes_show(tmp_path: Path) -> None:
    for encoding in ("utf-8", "utf-8-sig", "cp1252"):
        path = tmp_path / f"{encoding}.csv.gz"
        path.write_bytes(gzip.compress(TEXT.encode(encoding)))
        source = CsvSource(path, delimiter=";")
        records = [r for r in source.records() if isinstance(r, RawRecord)]
        assert [r.fields["name"] for r in records] == ["Kaffee", "Müller Kaffee", "Crème"]
        assert source.header == ("sku", "name")


def test_auto_keeps_the_reading_of_a_utf8_file(tmp_path: Path) -> None:
    """A UTF-8 file read with ``auto`` reads as with ``utf-8``: its lines' identity for the
    line route is unchanged, so nothing is relearnt after the upgrade."""
    path = tmp_path / "p.csv"
    path.write_bytes(TEXT.encode("utf-8"))
    auto, declared = (
        CsvSource(path, delimiter=";").lines(),
        CsvSource(path, delimiter=";", encoding="utf-8").lines(),
    )
    assert list(auto) == list(declared) and auto.identity == declared.identity


# --- a line that repeats the header (issue 37, item 6) ------------------------------------


def test_a_csv_line_repeating_the_header_is_a_bad_row_and_no_product(tmp_path: Path) -> None:
    path = tmp_path / "two.csv"
    path.write_bytes(b"sku,name\nA,Anvil\n\xef\xbb\xbfsku,name\nB,Bucket\nsku , name\n")
    out = list(CsvSource(path).records())
    assert [r.fields["sku"] for r in out if isinstance(r, RawRecord)] == ["A", "B"]
    bad = [r for r in out if isinstance(r, BadRecord)]
    assert [(b.line, b.no_product) for b in bad] == [(3, True), (5, True)]
    assert "two.csv line 3: the line repeats the header" in bad[0].reason
    lines = CsvSource(path).lines()
    list(lines)  # the line route parses a line it does not recognise as records() would
    (again,) = lines.parse(5, "sku , name\n")
    assert isinstance(again, BadRecord) and again.no_product


def test_an_xlsx_row_repeating_the_header_is_a_bad_row_and_no_product(tmp_path: Path) -> None:
    from openpyxl import Workbook

    from skuferry.sources.xlsx import XlsxSource

    path = tmp_path / "two.xlsx"
    book = Workbook()
    sheet = book.active
    for row in (["sku", "name"], ["A", "Anvil"], ["sku", "name"], ["B", "Bucket"]):
        sheet.append(row)
    book.save(path)
    for reader in ("openpyxl", "calamine"):
        out = list(XlsxSource(path, reader=reader).records())
        bad = [r for r in out if isinstance(r, BadRecord)]
        assert [(b.line, b.no_product) for b in bad] == [(3, True)], reader
        assert [r.fields["sku"] for r in out if isinstance(r, RawRecord)] == ["A", "B"]
