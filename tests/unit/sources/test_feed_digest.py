"""A feed's content identity (``Source.feed_digest``) beyond the shared contract: compressed
files, the CSV's line route, a workbook changed while it is read, a stream that grows after
its end, the wrappers' forwarding, an API's pages in another order, an incremental window."""

from __future__ import annotations

import gzip
import io
import json
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from skuferry.config.load import settings_from_dict
from skuferry.config.schema import HttpSourceSettings
from skuferry.errors import SourceError
from skuferry.models import RawLines, RawRecord
from skuferry.sandbox.catalog_files import write_xlsx_rows
from skuferry.sources.base import Source
from skuferry.sources.csv import CsvSource
from skuferry.sources.digest import FeedDigest
from skuferry.sources.dispatch import open_source
from skuferry.sources.http import HttpSource
from skuferry.sources.ready import ReadyGate, ReadySource
from skuferry.sources.skip import skip_empty_rows
from skuferry.sources.xlsx import XlsxSource
from skuferry.sync.read.pieces import assemble
from tests.json_api import JsonApi

CSV = b"sku,name,price\nA-1,Anvil,19.90\nB-2,Bucket,4.50\n,,\nC-3,Crowbar,12.00\n"


def read(source: Source) -> str | None:
    list(source.records())
    return source.feed_digest()


def test_a_compressed_file_is_known_by_its_content_as_a_plain_one(tmp_path: Path) -> None:
    plain = tmp_path / "p.csv"
    plain.write_bytes(CSV)
    gz = tmp_path / "p.csv.gz"
    gz.write_bytes(gzip.compress(CSV))
    zipped = tmp_path / "p.zip"
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("export/p.csv", CSV)
    digest = read(CsvSource(plain))
    assert digest is not None and digest.startswith("bytes:")
    assert read(CsvSource(gz)) == read(CsvSource(zipped)) == digest


def test_a_cut_short_archive_knows_no_feed(tmp_path: Path) -> None:
    big = CSV + b"".join(b"S-%d,Name %d,1.00\n" % (i, i) for i in range(50_000))
    cut = tmp_path / "cut.csv.gz"
    cut.write_bytes(gzip.compress(big)[:20_000])
    source = CsvSource(cut)
    with pytest.raises(SourceError, match="truncated or corrupt"):
        list(source.records())
    assert source.feed_digest() is None


def test_the_line_route_reads_the_same_feed_as_the_records(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_bytes(CSV + b'D-4,"Drill, cordless",99.00\n')
    source = CsvSource(path)
    by_records = read(source)
    items = list(source.lines())
    assert any(isinstance(i, RawLines) for i in items) and any(
        isinstance(i, RawRecord) for i in items
    )
    assert source.feed_digest() == by_records is not None


def test_a_reading_that_begins_forgets_the_last_ones_digest(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_bytes(CSV)
    source = CsvSource(path)
    assert read(source) is not None
    records = source.records()
    next(records)
    assert source.feed_digest() is None, "a new reading, not yet at its end"
    records.close()  # type: ignore[attr-defined]
    assert source.feed_digest() is None


class Growing(io.RawIOBase):
    """A stream that says it ended, then has more (a file appended to while read)."""

    def __init__(self) -> None:
        self.parts = [b"abc", b"", b"def", b""]

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.parts.pop(0) if self.parts else b""
        buffer[: len(data)] = data
        return len(data)


def test_a_stream_that_grows_after_its_end_is_not_known() -> None:
    digest = FeedDigest()
    stream = digest.stream(Growing())  # type: ignore[arg-type]
    assert stream.read(3) == b"abc"
    assert stream.read(3) == b""
    assert stream.read(3) == b"def"
    digest.ended()
    assert digest.value is None
    whole = FeedDigest()
    assert whole.stream(io.BytesIO(b"abcdef")).read() == b"abcdef"
    whole.ended()
    assert whole.value is not None and whole.value.startswith("bytes:")


def test_a_workbook_changed_while_its_sheet_is_read_is_not_known(tmp_path: Path) -> None:
    rows: list[list[Any]] = [["sku", "name"], *([f"S-{i}", f"N {i}"] for i in range(50))]
    path = write_xlsx_rows(tmp_path / "p.xlsx", rows)
    source = XlsxSource(path)
    whole = read(source)
    assert whole is not None and whole.startswith("file:")
    records = source.records()
    next(records)
    path.write_bytes(path.read_bytes())  # rewritten in place while the sheet is read
    list(records)
    assert source.feed_digest() is None


def test_every_wrapper_says_its_inner_sources_feed(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_bytes(CSV)
    inner = CsvSource(path)
    expected = read(CsvSource(path))
    skipping = skip_empty_rows(inner, ["sku"])
    assert read(skipping) == expected
    ready = tmp_path / "p.csv.done"
    ready.touch()
    gate = ReadyGate(path, ready, timeout_s=1.0, stop=None)
    assert read(ReadySource(CsvSource(path), gate)) == expected
    settings = settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k"},
            "source": {"type": "csv", "path": str(path), "where": "sku != ''"},
            "mapping": {"key": "sku"},
        }
    )
    pieces = assemble(CsvSource(path), settings.mapping, where="sku != ''", joins=[])
    assert read(pieces) == expected


def http(json_api: JsonApi, **options: Any) -> HttpSource:
    settings = HttpSourceSettings.model_validate(
        {
            "type": "http",
            "url": json_api.url,
            "items_path": "items",
            "pagination": "none",
            **options,
        }
    )
    source = open_source(settings)
    assert isinstance(source, HttpSource)
    return source


ITEMS = [{"sku": f"A-{i}", "price": 1.5 + i, "tags": ["x", i]} for i in range(5)]


def test_an_apis_feed_is_its_items_in_any_order_and_not_its_envelope(json_api: JsonApi) -> None:
    source = http(json_api)
    json_api.serve({"generated_at": "2026-11-28T10:00:00Z", "items": ITEMS})
    first = read(source)
    assert first is not None and first.startswith("records:5:")
    json_api.serve({"generated_at": "2026-11-28T10:15:00Z", "items": ITEMS[::-1]})
    assert read(source) == first, "the same items: another time stamp, another order"
    json_api.serve({"generated_at": "2026-11-28T10:15:00Z", "items": [*ITEMS[:4], {"sku": "A-4"}]})
    assert read(source) not in (None, first)
    json_api.serve({"items": [*ITEMS, ITEMS[0]]})
    assert read(source) != first, "a record twice is another feed"


def test_an_incremental_window_is_not_the_feed(json_api: JsonApi) -> None:
    source = http(json_api, since_param="updated_since")
    json_api.serve({"items": ITEMS})
    assert read(source) is not None
    window = list(source.pull(datetime(2026, 11, 1, tzinfo=UTC)))
    assert len(window) == 5 and source.feed_digest() is None
    assert json.loads(json_api.body)["items"] == ITEMS
