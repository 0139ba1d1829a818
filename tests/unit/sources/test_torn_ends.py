"""A record is whole or it is not read: a line format's torn end fails the pull.

CSV and JSON Lines, plain, gzipped and zipped, through ``records()`` and the CSV
line reader: a last line without its line break ends the pull with ``SourceError``
naming the file, the line and the key that declares an exporter that never
writes one (``final_newline = "optional"``), which reads it as a whole record.
"""

from __future__ import annotations

import gzip
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from skuferry.config.schema import ShortRows
from skuferry.errors import SourceError
from skuferry.models import BadRecord, RawLines, RawRecord
from skuferry.sources.csv import CsvSource
from skuferry.sources.jsonl import JsonlSource

CSV = b"sku,name,price\nA-1,Anvil,687.70\nB-2,Bucket,12.50\n"
JSONL = b'{"sku": "A-1", "price": "687.70"}\n{"sku": "B-2", "price": "12.50"}\n'


def _plain(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _gz(path: Path, data: bytes) -> Path:
    path = path.with_name(path.name + ".gz")
    path.write_bytes(gzip.compress(data))
    return path


def _zip(path: Path, data: bytes) -> Path:
    target = path.with_name(path.name + ".zip")
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(path.name, data)
    return target


WRITERS = [_plain, _gz, _zip]


def _drain(items: Iterable[object]) -> list[object]:
    return list(items)


def _csv_reads(source: CsvSource) -> list[Callable[[], list[object]]]:
    return [lambda: _drain(source.records()), lambda: _drain(source.lines(block=1))]


@pytest.mark.parametrize("write", WRITERS)
def test_a_csv_cut_inside_its_last_field_fails_the_pull(
    tmp_path: Path, write: Callable[[Path, bytes], Path]
) -> None:
    # every column is there, the price is short: only the missing line break shows it
    path = write(tmp_path / "catalog.csv", CSV[: CSV.index(b"12.50") + 2])
    for read in _csv_reads(CsvSource(path)):
        with pytest.raises(SourceError) as caught:
            read()
        message = str(caught.value)
        assert message.startswith(f"{path.name} line 3: the file ends inside this line")
        assert "'B-2,Bucket,12'" in message
        assert 'final_newline = "optional"' in message


@pytest.mark.parametrize("write", WRITERS)
def test_a_jsonl_cut_anywhere_in_its_last_line_fails_the_pull(
    tmp_path: Path, write: Callable[[Path, bytes], Path]
) -> None:
    for cut in (len(JSONL) - 1, len(JSONL) - 5, JSONL.index(b"B-2")):
        path = write(tmp_path / f"catalog{cut}.jsonl", JSONL[:cut])
        with pytest.raises(SourceError, match=rf"^{path.name} line 2: the file ends inside"):
            list(JsonlSource(path).records())


def test_whole_files_read_as_before(tmp_path: Path) -> None:
    csv_path = _plain(tmp_path / "c.csv", CSV)
    assert [r.fields for r in CsvSource(csv_path).records() if isinstance(r, RawRecord)] == [
        {"sku": "A-1", "name": "Anvil", "price": "687.70"},
        {"sku": "B-2", "name": "Bucket", "price": "12.50"},
    ]
    lines = list(CsvSource(csv_path).lines())
    assert [type(item) for item in lines] == [RawLines]
    jsonl_path = _plain(tmp_path / "j.jsonl", JSONL)
    assert len(list(JsonlSource(jsonl_path).records())) == 2


def test_crlf_and_lone_cr_end_a_line(tmp_path: Path) -> None:
    for data in (CSV.replace(b"\n", b"\r\n"), CSV.replace(b"\n", b"\r")):
        path = _plain(tmp_path / "c.csv", data)
        assert len(list(CsvSource(path).records())) == 2
        assert len(list(CsvSource(path).lines())) == 1


def test_final_newline_optional_reads_the_last_line_whole(tmp_path: Path) -> None:
    path = _plain(tmp_path / "c.csv", CSV.rstrip(b"\n"))
    source = CsvSource(path, final_newline="optional")
    assert list(source.records())[-1] == RawRecord(
        3, {"sku": "B-2", "name": "Bucket", "price": "12.50"}
    )
    assert list(source.lines(block=1))[-1] == RawLines(3, ["B-2,Bucket,12.50"])
    jsonl = _plain(tmp_path / "j.jsonl", JSONL.rstrip(b"\n"))
    assert list(JsonlSource(jsonl, final_newline="optional").records())[-1] == RawRecord(
        2, {"sku": "B-2", "price": "12.50"}
    )


def test_a_header_cut_short_is_torn_and_an_empty_file_is_not(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="line 1: the file ends inside"):
        list(CsvSource(_plain(tmp_path / "h.csv", b"sku,na")).records())
    assert list(CsvSource(_plain(tmp_path / "e.csv", b"")).records()) == []
    assert list(CsvSource(_plain(tmp_path / "e.csv", b"")).lines()) == []
    assert list(JsonlSource(_plain(tmp_path / "e.jsonl", b"")).records()) == []


def test_a_quote_left_open_at_a_torn_end_fails_the_pull(tmp_path: Path) -> None:
    # the cut is inside a quoted description: the rows are rejected, and the pull fails too
    path = _plain(tmp_path / "c.csv", b'sku,text\nA-1,"first line\nsecond')
    for read in _csv_reads(CsvSource(path)):
        with pytest.raises(SourceError, match=r"c\.csv line 3: the file ends inside"):
            read()


def test_an_overlong_last_line_without_a_break_is_torn(tmp_path: Path) -> None:
    path = _plain(tmp_path / "j.jsonl", b'{"sku": "A"}\n{"sku": "' + b"x" * 100)
    with pytest.raises(SourceError, match=r"j\.jsonl line 2: the file ends inside"):
        list(JsonlSource(path, max_line_bytes=20).records())
    whole = _plain(tmp_path / "w.jsonl", b'{"sku": "' + b"x" * 100 + b'"}\n{"sku": "A"}\n')
    out = list(JsonlSource(whole, max_line_bytes=20).records())
    assert isinstance(out[0], BadRecord) and out[1] == RawRecord(2, {"sku": "A"})


def test_short_rows_read_the_same_through_the_line_reader(tmp_path: Path) -> None:
    path = _plain(tmp_path / "c.csv", b"sku,name,price\nA-1,Anvil\nB-2,Bucket,2\n")
    modes: tuple[ShortRows, ...] = ("error", "pad")
    for mode in modes:
        source = CsvSource(path, short_rows=mode)
        lines = source.lines(block=1)
        expanded: list[object] = []
        for item in lines:
            assert isinstance(item, RawLines)
            for number, text in enumerate(item.texts, start=item.start):
                expanded.extend(lines.parse(number, text))
        assert expanded == list(source.records())
    # how short rows read is part of what a line's digest stands for
    identities = set()
    for mode in modes:
        lines = CsvSource(path, short_rows=mode).lines()
        list(lines)
        identities.add(lines.identity)
    assert len(identities) == 2


def test_a_crlf_file_cut_between_cr_and_lf_is_torn(tmp_path: Path) -> None:
    data = CSV.replace(b"\n", b"\r\n")
    path = _plain(tmp_path / "c.csv", data[:-1])  # "...12.50\r"
    for read in _csv_reads(CsvSource(path)):
        with pytest.raises(SourceError, match=r"c\.csv line 3: the file ends inside"):
            read()
    path = _plain(tmp_path / "j.jsonl", JSONL.replace(b"\n", b"\r\n")[:-1])
    with pytest.raises(SourceError, match=r"j\.jsonl line 2: the file ends inside"):
        list(JsonlSource(path).records())
