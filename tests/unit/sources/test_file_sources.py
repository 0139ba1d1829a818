"""The csv and jsonl sources: the shared source contract, then what is particular to each."""

from __future__ import annotations

import csv
import gc
import json
from collections.abc import Generator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from skuferry.config.schema import CsvSourceSettings, JsonlSourceSettings
from skuferry.errors import ConfigError, SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.base import Source
from skuferry.sources.csv import CsvSource, leading_cells
from skuferry.sources.dispatch import open_source
from skuferry.sources.jsonl import JsonlSource, leading_members
from tests.source_contract import GOOD, SourceContract


def _read(source: Source) -> list[RawRecord | BadRecord]:
    return list(source.records())


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# -- the contract ------------------------------------------------------------------------


class TestCsvContract(SourceContract):
    def _write_csv(self, path: Path, records: list[dict[str, Any]]) -> Path:
        with path.open("w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["sku", "name", "price"])
            for record in records:
                writer.writerow([record["sku"], record["name"], record["price"]])
        return path

    def make_source(self, tmp_path: Path, records: list[dict[str, Any]]) -> Source:
        return CsvSource(self._write_csv(tmp_path / "products.csv", records))

    def make_source_with_bad_record(self, tmp_path: Path) -> tuple[Source, int]:
        path = self._write_csv(tmp_path / "products.csv", GOOD[:2])
        with path.open("ab") as handle:
            handle.write(b"X-9,Broken \xe9 name,1.00\r\n")
        self._append(path, GOOD[2:])
        return CsvSource(path), 1

    def _append(self, path: Path, records: list[dict[str, Any]]) -> None:
        with path.open("a", encoding="utf-8", newline="") as handle:
            csv.writer(handle).writerows([[r["sku"], r["name"], r["price"]] for r in records])

    def make_unreachable_source(self, tmp_path: Path) -> tuple[Source, str]:
        path = tmp_path / "nowhere" / "products.csv"
        return CsvSource(path), str(path)

    def make_large_source(self, tmp_path: Path, n: int) -> Source:
        path = tmp_path / "large.csv"
        with path.open("w", encoding="utf-8") as handle:
            handle.write("sku,name,price\n")
            handle.writelines(f"SKU-{i},Product {i},{i % 100}.90\n" for i in range(n))
        return CsvSource(path)


class TestJsonlContract(SourceContract):
    def make_source(self, tmp_path: Path, records: list[dict[str, Any]]) -> Source:
        path = tmp_path / "products.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        return JsonlSource(path)

    def make_source_with_bad_record(self, tmp_path: Path) -> tuple[Source, int]:
        lines = [json.dumps(r) for r in GOOD]
        lines.insert(2, '{"sku": "X-9", "name": ')
        path = tmp_path / "products.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return JsonlSource(path), 1

    def make_unreachable_source(self, tmp_path: Path) -> tuple[Source, str]:
        path = tmp_path / "nowhere" / "products.jsonl"
        return JsonlSource(path), str(path)

    def make_large_source(self, tmp_path: Path, n: int) -> Source:
        path = tmp_path / "large.jsonl"
        with path.open("w", encoding="utf-8") as handle:
            handle.writelines(
                f'{{"sku": "SKU-{i}", "name": "Product {i}", "price": {i % 100}.90}}\n'
                for i in range(n)
            )
        return JsonlSource(path)


# -- csv ---------------------------------------------------------------------------------


def test_csv_line_is_where_a_multi_line_row_starts(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "products.csv",
        b'sku,name\r\nA-1,Anvil\r\nB-2,"Bucket\r\nwith a handle"\r\n\r\nC-3,Crowbar\r\n',
    )
    out = _read(CsvSource(path))
    assert [(r.line, r.fields) for r in out if isinstance(r, RawRecord)] == [
        (2, {"sku": "A-1", "name": "Anvil"}),
        (3, {"sku": "B-2", "name": "Bucket\r\nwith a handle"}),
        (6, {"sku": "C-3", "name": "Crowbar"}),
    ]


def test_csv_skips_blank_lines_and_keeps_counting(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.csv", b"\nsku,name\n\n   \nA-1,Anvil\n\n")
    out = _read(CsvSource(path))
    assert out == [RawRecord(5, {"sku": "A-1", "name": "Anvil"})]


def test_csv_bom_is_skipped_and_header_names_are_stripped(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.csv", "\ufeff sku , name\nA-1, Anvil \n".encode())
    assert _read(CsvSource(path)) == [RawRecord(2, {"sku": "A-1", "name": " Anvil "})]


def test_csv_semicolon_delimiter(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.csv", b'sku;name;price\nA-1;"Anvil; heavy";19,90\n')
    out = _read(CsvSource(path, delimiter=";"))
    assert out == [RawRecord(2, {"sku": "A-1", "name": "Anvil; heavy", "price": "19,90"})]


def test_csv_latin1_encoding(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.csv", "sku,name\nC-3,Crowbar ü\n".encode("latin-1"))
    out = _read(CsvSource(path, encoding="latin-1"))
    assert out == [RawRecord(2, {"sku": "C-3", "name": "Crowbar ü"})]


def test_csv_invalid_utf8_rejects_only_that_row(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "products.csv",
        b"sku,Description\nA-1,Anvil\nB-2,Caf\xe9 table\nC-3,Crowbar \xc3\xbc\n",
    )
    out = _read(CsvSource(path))
    assert out == [
        RawRecord(2, {"sku": "A-1", "Description": "Anvil"}),
        BadRecord(3, "products.csv line 3, column 'Description': invalid utf-8 (byte 0xe9)"),
        RawRecord(4, {"sku": "C-3", "Description": "Crowbar ü"}),
    ]


def test_csv_too_many_fields_is_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path / "products.csv", b"sku,name,price\nA-1,Anvil,1,extra\nB-2,Bucket,2\n")
    out = _read(CsvSource(path))
    assert out == [
        BadRecord(2, "products.csv line 2: 4 fields, the header has 3"),
        RawRecord(3, {"sku": "B-2", "name": "Bucket", "price": "2"}),
    ]


def test_csv_fewer_fields_is_rejected_with_its_key_read(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.csv", b"sku,name,price\nA-1,Anvil\nB-2,Bucket,2\n")
    out = _read(CsvSource(path))
    assert out[1:] == [RawRecord(3, {"sku": "B-2", "name": "Bucket", "price": "2"})]
    bad = out[0]
    assert isinstance(bad, BadRecord) and bad.line == 2
    assert bad.reason.startswith("p.csv line 2: 2 field(s), the header has 3")
    assert 'short_rows = "pad"' in bad.reason
    # the key is read, so the product is held; which field is missing is unknown
    assert bad.fields == {"sku": "A-1", "name": "Anvil"} and bad.guessed


def test_csv_short_rows_pad_reads_the_missing_fields_as_empty(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.csv", b"sku,name,price\nA-1,Anvil\n")
    out = _read(CsvSource(path, short_rows="pad"))
    assert out == [RawRecord(2, {"sku": "A-1", "name": "Anvil", "price": ""})]


def test_csv_stray_quote_rejects_the_row_and_reads_on(tmp_path: Path) -> None:
    path = _write(tmp_path / "products.csv", b'sku,name\nA-1,"Anvil"heavy\nB-2,Bucket\n')
    out = _read(CsvSource(path))
    assert isinstance(out[0], BadRecord)
    assert out[0].line == 2 and out[0].reason.startswith("products.csv line 2: ")
    assert out[1:] == [RawRecord(3, {"sku": "B-2", "name": "Bucket"})]


def _bad(out: list[RawRecord | BadRecord]) -> list[tuple[int, str, dict[str, Any] | None]]:
    """(line, reason, sure fields) of each rejected record."""
    return [
        (r.line, r.reason, dict(r.fields) if r.fields is not None else None)
        for r in out
        if isinstance(r, BadRecord)
    ]


def test_csv_unclosed_quote_rejects_the_lines_it_swallowed_and_reads_on(tmp_path: Path) -> None:
    # The quote opened on line 3 is taken as closed by the next quote, on line 5:
    # lines 3-5 are one broken row. Each is reported with the cells sure in it.
    path = _write(
        tmp_path / "products.csv",
        b'sku,name,price\nA-1,Anvil,1\nB-2,"Bucket,2\nC-3,Crowbar,3\nD-4,"Drill",4\nE-5,Easel,5\n',
    )
    out = _read(CsvSource(path))
    span = "lines 3\u20135 rejected"
    assert _bad(out) == [
        (3, f"products.csv line 3: a quote opened here runs to line 5 (',' expected after '\"'); "
            f"{span}", {"sku": "B-2"}),
        (4, f"products.csv line 4: inside the quote opened on line 3; {span}",
            {"sku": "C-3", "name": "Crowbar", "price": "3"}),
        (5, f"products.csv line 5: inside the quote opened on line 3; {span}",
            {"sku": "D-4", "name": "Drill", "price": "4"}),
    ]  # fmt: skip
    assert [r for r in out if isinstance(r, RawRecord)] == [
        RawRecord(2, {"sku": "A-1", "name": "Anvil", "price": "1"}),
        RawRecord(6, {"sku": "E-5", "name": "Easel", "price": "5"}),
    ]


def test_csv_quote_never_closed_rejects_the_rest_of_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "products.csv", b'sku,name\nA-1,"Anvil\nB-2,Bucket\n\nC-3,Cart\n')
    out = _read(CsvSource(path))
    span = "lines 2\u20135 rejected"
    assert _bad(out) == [
        (2, f"products.csv line 2: a quote opened here runs to the end of the file (line 5); "
            f"{span}", {"sku": "A-1"}),
        (3, f"products.csv line 3: inside the quote opened on line 2; {span}",
            {"sku": "B-2", "name": "Bucket"}),
        # line 4 is blank: it holds no product
        (5, f"products.csv line 5: inside the quote opened on line 2; {span}",
            {"sku": "C-3", "name": "Cart"}),
    ]  # fmt: skip
    assert len(out) == 3


def test_csv_quote_opened_on_the_last_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "products.csv", b'sku,name\nA-1,Anvil\nB-2,"Bucket\n')
    out = _read(CsvSource(path))
    assert out[0] == RawRecord(2, {"sku": "A-1", "name": "Anvil"})
    assert _bad(out) == [
        (3, "products.csv line 3: a quote opened here is never closed; line 3 rejected",
            {"sku": "B-2"}),
    ]  # fmt: skip


def test_csv_quote_closed_in_another_column_rows_later_is_not_one_row(tmp_path: Path) -> None:
    # Read as one row without an error, but with fewer fields than the header.
    path = _write(tmp_path / "products.csv", b'sku,name,price\nA-1,"Anvil,1\nB-2,Bucket,2"\n')
    out = _read(CsvSource(path))
    assert [(line, reason.split(";")[0]) for line, reason, _ in _bad(out)] == [
        (2, "products.csv line 2: a quote opened here runs to line 3, read as one row of "
            "2 fields (the header has 3)"),
        (3, "products.csv line 3: inside the quote opened on line 2"),
    ]  # fmt: skip


def test_csv_a_cell_with_line_breaks_is_still_one_row(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.csv", b'sku,text,price\nA-1,"<p>Soft, warm</p>\n<p>Oak</p>",1\n')
    assert _read(CsvSource(path)) == [
        RawRecord(2, {"sku": "A-1", "text": "<p>Soft, warm</p>\n<p>Oak</p>", "price": "1"})
    ]


def test_csv_bad_rows_hand_over_the_cells_sure_in_them(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "products.csv",
        b'sku,name,price\nA-1,Caf\xe9,1\nB-2,Bucket, large,2\nC-3,"Crowbar"x,3\n"D-4""x,1\n',
    )
    # declared UTF-8: the cp1252 byte is a bad row ("auto" would read the file as cp1252)
    bad = [r for r in _read(CsvSource(path, encoding="utf-8")) if isinstance(r, BadRecord)]
    assert [(r.line, r.fields, r.guessed) for r in bad] == [
        (2, {"sku": "A-1", "name": "Caf\udce9", "price": "1"}, False),  # a bad byte: in place
        (3, {"sku": "B-2", "name": "Bucket", "price": " large"}, True),  # maybe shifted
        (4, {"sku": "C-3"}, False),  # the cells before the stray quote
        # the stray quote is in the first cell: nothing is sure; it is still open at the
        # end of the file, so the record may have been cut: no product is proven absent
        (5, {}, True),
    ]


@pytest.mark.parametrize(
    ("line", "cells", "complete"),
    [
        ("a,b,c\r\n", ["a", "b", "c"], True),
        ('a,"b, ""c""",d\n', ["a", 'b, "c"', "d"], True),
        ("a,b,\n", ["a", "b", ""], True),
        ('a,"b', ["a"], False),  # the line ends inside quotes
        ('a,"b"x,c', ["a"], False),  # a quote closed inside a cell
        ('a,b"x,c', ["a", 'b"x', "c"], True),  # a quote inside an unquoted cell is text
    ],
)
def test_csv_leading_cells(line: str, cells: list[str], complete: bool) -> None:
    assert leading_cells(line, ",") == (cells, complete)


@pytest.mark.parametrize(
    ("header", "problem"),
    [
        (b"sku,name,sku\n", "'sku' appears twice"),
        (b"sku, ,price\n", "column 2 has no name"),
        (b"sku,name,\n", "column 3 has no name"),
    ],
)
def test_csv_bad_header_names_file_and_column(tmp_path: Path, header: bytes, problem: str) -> None:
    path = _write(tmp_path / "products.csv", header + b"A-1,Anvil,1\n")
    with pytest.raises(SourceError) as info:
        _read(CsvSource(path))
    assert str(path) in str(info.value)
    assert problem in str(info.value)


def test_csv_empty_file_yields_nothing(tmp_path: Path) -> None:
    assert _read(CsvSource(_write(tmp_path / "p.csv", b""))) == []


def test_csv_unreadable_file_names_path_and_reason(tmp_path: Path) -> None:
    folder = tmp_path / "products.csv"
    folder.mkdir()  # a directory cannot be read as a file, even by root
    with pytest.raises(SourceError) as info:
        _read(CsvSource(folder))
    assert str(folder) in str(info.value)
    assert "Is a directory" in str(info.value)


def test_csv_missing_file_names_path_and_reason(tmp_path: Path) -> None:
    path = tmp_path / "gone.csv"
    with pytest.raises(SourceError) as info:
        _read(CsvSource(path))
    assert str(path) in str(info.value)
    assert "No such file or directory" in str(info.value)


@pytest.mark.parametrize(
    ("options", "where"),
    [
        ({"encoding": "no-such-codec"}, "source.encoding"),
        ({"delimiter": ";;"}, "source.delimiter"),
        ({"delimiter": '"'}, "source.delimiter"),
    ],
)
def test_csv_bad_options_are_config_errors(
    tmp_path: Path, options: dict[str, str], where: str
) -> None:
    with pytest.raises(ConfigError, match=where):
        CsvSource(
            tmp_path / "p.csv",
            encoding=options.get("encoding", "utf-8"),
            delimiter=options.get("delimiter", ","),
        )


def test_stopping_early_closes_the_file(tmp_path: Path) -> None:
    # filterwarnings=error turns an unclosed file's ResourceWarning into a failure.
    path = _write(tmp_path / "p.csv", b"sku\nA-1\nB-2\n")
    stream = CsvSource(path).records()
    assert isinstance(stream, Generator)  # closing a generator closes the file it holds
    assert next(stream) == RawRecord(2, {"sku": "A-1"})
    stream.close()
    gc.collect()


# -- jsonl -------------------------------------------------------------------------------


def test_jsonl_keeps_decimal_digits(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.jsonl", b'{"sku": "A-1", "price": 19.90, "qty": 3, "w": 1e2}\n')
    [record] = _read(JsonlSource(path))
    assert isinstance(record, RawRecord)
    assert record.fields == {"sku": "A-1", "price": Decimal("19.90"), "qty": 3, "w": Decimal("1e2")}
    assert str(record.fields["price"]) == "19.90"


def test_jsonl_blank_lines_skipped_and_lines_counted(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.jsonl", b'\n{"sku": "A-1"}\r\n  \n{"sku": "B-2"}\n')
    assert _read(JsonlSource(path)) == [RawRecord(2, {"sku": "A-1"}), RawRecord(4, {"sku": "B-2"})]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (
            b'{"sku": "X"',
            "products.jsonl line 2: not valid JSON (Expecting ',' delimiter at character 12)",
        ),
        (b'["sku", "X"]', "products.jsonl line 2: an array, not a JSON object"),
        (b'"X"', "products.jsonl line 2: a string, not a JSON object"),
        (b"null", "products.jsonl line 2: null, not a JSON object"),
        (b"42", "products.jsonl line 2: a number, not a JSON object"),
        (
            b'{"sku": "X", "price": NaN}',
            "products.jsonl line 2: not valid JSON (NaN is not a JSON number)",
        ),
        (b'{"sku": "Caf\xe9"}', "products.jsonl line 2: invalid utf-8 (byte 0xe9 at position 13)"),
    ],
)
def test_jsonl_bad_line_is_rejected_and_the_rest_read(
    tmp_path: Path, line: bytes, reason: str
) -> None:
    path = _write(tmp_path / "products.jsonl", b'{"sku": "A-1"}\n' + line + b'\n{"sku": "C-3"}\n')
    assert _read(JsonlSource(path)) == [
        RawRecord(1, {"sku": "A-1"}),
        BadRecord(2, reason),
        RawRecord(3, {"sku": "C-3"}),
    ]


def test_jsonl_broken_lines_hand_over_the_members_sure_in_them(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "p.jsonl",
        b'{"sku": "A-1", "name": "Caf\xe9"}\n'  # a bad byte: the object is whole
        b'{"sku": "B-2", "name": "Bucket\n'  # cut short
        b'{"sku": "C-3", "price": 1.0.0}\n'  # a broken number after the key
        b'{"price": 1.0.0, "sku": "D-4"}\n'  # ... and before it: nothing after it is sure
        b'["E-5"]\n'
        b'{"sku": "F-6"}\n',
    )
    out = _read(JsonlSource(path))
    assert [(r.line, r.fields) for r in out if isinstance(r, BadRecord)] == [
        (1, {"sku": "A-1", "name": "Caf\udce9"}),
        (2, {"sku": "B-2"}),
        (3, {"sku": "C-3"}),
        (4, {}),
        (5, None),
    ]
    assert out[-1] == RawRecord(6, {"sku": "F-6"})


@pytest.mark.parametrize(
    ("text", "members"),
    [
        ('{"sku": "A", "n": {"x": [1, 2]}, "p": 1', {"sku": "A", "n": {"x": [1, 2]}}),
        ('{"sku": 12.5.3}', {}),  # 12.5 is only the start of what is there
        ('{"sku": "A"}extra', {"sku": "A"}),
        ('{"sku": "A" "p": 1}', {}),
        ("[1, 2]", {}),
    ],
)
def test_jsonl_leading_members(text: str, members: dict[str, Any]) -> None:
    assert leading_members(text) == members


def test_jsonl_bom_and_latin1(tmp_path: Path) -> None:
    bom = _write(tmp_path / "bom.jsonl", '\ufeff{"sku": "A-1"}\n'.encode())
    assert _read(JsonlSource(bom)) == [RawRecord(1, {"sku": "A-1"})]
    latin = _write(tmp_path / "latin.jsonl", '{"name": "Crowbar ü"}\n'.encode("latin-1"))
    assert _read(JsonlSource(latin, encoding="latin-1")) == [RawRecord(1, {"name": "Crowbar ü"})]


def test_jsonl_needs_an_ascii_compatible_encoding(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="ASCII-compatible"):
        JsonlSource(tmp_path / "p.jsonl", encoding="utf-16")


def test_jsonl_unreadable_file_names_path_and_reason(tmp_path: Path) -> None:
    with pytest.raises(SourceError) as info:
        _read(JsonlSource(tmp_path))
    assert str(tmp_path) in str(info.value)
    assert "Is a directory" in str(info.value)


# -- the registry ------------------------------------------------------------------------


def test_open_source_builds_csv_and_jsonl_from_settings(tmp_path: Path) -> None:
    csv_path = _write(tmp_path / "p.csv", b"sku;name\nA-1;Anvil\n")
    csv_source = open_source(
        CsvSourceSettings(type="csv", path=csv_path, delimiter=";", encoding="latin-1")
    )
    assert isinstance(csv_source, CsvSource)
    assert csv_source.describe() == str(csv_path)
    assert _read(csv_source) == [RawRecord(2, {"sku": "A-1", "name": "Anvil"})]

    jsonl_path = _write(tmp_path / "p.jsonl", b'{"sku": "A-1"}\n')
    jsonl_source = open_source(JsonlSourceSettings(type="jsonl", path=jsonl_path))
    assert isinstance(jsonl_source, JsonlSource)
    assert jsonl_source.describe() == str(jsonl_path)
