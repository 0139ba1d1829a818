"""Parser hardening and compressed files: a huge record is refused, a cut archive fails the pull."""

from __future__ import annotations

import gzip
import zipfile
from pathlib import Path

import pytest

from skuferry.errors import SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.csv import CsvSource
from skuferry.sources.jsonl import JsonlSource


def test_a_jsonl_line_over_the_limit_is_refused_unread_and_the_rest_read(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    huge = '{"sku": "H", "blob": "' + "x" * 5000 + '"}'
    path.write_text(f'{{"sku": "A"}}\n{huge}\n{{"sku": "B"}}\n', encoding="utf-8")
    out = list(JsonlSource(path, max_line_bytes=1024).records())
    assert [type(r) for r in out] == [RawRecord, BadRecord, RawRecord]
    assert isinstance(out[1], BadRecord)
    assert out[1].line == 2 and "p.jsonl line 2: longer than 1,024 bytes" in out[1].reason
    assert isinstance(out[2], RawRecord) and out[2].line == 3 and out[2].fields == {"sku": "B"}


def test_a_jsonl_line_just_at_the_limit_is_read(tmp_path: Path) -> None:
    line = '{"sku": "' + "a" * 100 + '"}'
    path = tmp_path / "p.jsonl"
    path.write_text(line + "\n" + line, encoding="utf-8")  # the last one without a newline
    source = JsonlSource(path, max_line_bytes=len(line), final_newline="optional")
    out = list(source.records())
    assert [type(r) for r in out] == [RawRecord, RawRecord]


def test_gzip_and_single_file_zip_are_read_by_csv_and_jsonl(tmp_path: Path) -> None:
    (tmp_path / "p.csv.gz").write_bytes(gzip.compress(b"sku,name\nA,\xc3\xa4\nB,b\n"))
    rows = list(CsvSource(tmp_path / "p.csv.gz").records())
    assert [r.fields for r in rows if isinstance(r, RawRecord)] == [
        {"sku": "A", "name": "ä"},
        {"sku": "B", "name": "b"},
    ]
    with zipfile.ZipFile(tmp_path / "export.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("folder/", b"")
        archive.writestr("folder/products.jsonl", b'{"sku": "A"}\n{"sku": "B"}\n')
    out = list(JsonlSource(tmp_path / "export.zip").records())
    assert [r.fields["sku"] for r in out if isinstance(r, RawRecord)] == ["A", "B"]


def test_a_truncated_gzip_fails_the_pull_naming_the_file(tmp_path: Path) -> None:
    data = gzip.compress(b"sku,name\n" + b"".join(b"S-%d,n\n" % i for i in range(20000)))
    path = tmp_path / "p.csv.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SourceError, match=r"p\.csv\.gz.*truncated or corrupt"):
        list(CsvSource(path).records())


def test_a_zip_with_several_files_is_refused_naming_them(tmp_path: Path) -> None:
    path = tmp_path / "export.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a.csv", "sku\nA\n")
        archive.writestr("b.csv", "sku\nB\n")
    with pytest.raises(SourceError, match=r"holding 2 files \(a\.csv, b\.csv\)"):
        list(CsvSource(path).records())
