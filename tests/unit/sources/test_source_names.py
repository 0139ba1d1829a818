"""``Source.name``: how a bad record's message names its source, typed on every adapter.

The engine used to cut it out of ``describe()``'s text; now each adapter says it: a
file's basename, a URL as configured with no secret in it, a wrapper its inner source's.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from skuferry.config.load import settings_from_dict
from skuferry.config.schema import SourceSettings
from skuferry.sources.base import Source
from skuferry.sources.dispatch import open_source
from skuferry.sync.read.pieces import Pieces, open_pieces

SOURCES: TypeAdapter[SourceSettings] = TypeAdapter(SourceSettings)


def _source(table: dict[str, object]) -> Source:
    return open_source(SOURCES.validate_python(table))


@pytest.mark.parametrize("kind", ["csv", "jsonl", "xml", "xlsx"])
def test_a_file_source_is_named_by_its_basename(tmp_path: Path, kind: str):
    extra = {"record": "ARTICLE"} if kind == "xml" else {}
    source = _source({"type": kind, "path": str(tmp_path / "exports" / f"catalog.{kind}"), **extra})
    assert source.name == f"catalog.{kind}"
    assert source.describe() == str(tmp_path / "exports" / f"catalog.{kind}")


def test_an_http_source_is_named_by_its_url_without_secrets():
    source = _source(
        {
            "type": "http",
            "url": "https://user:pw@pim.example.com/api/products?api_key=s3cret&lang=de",
            "items_path": "items",
        }
    )
    assert source.name == "https://pim.example.com/api/products?api_key=***&lang=de"
    assert "s3cret" not in source.name and "pw" not in source.name


def test_a_sql_source_is_named_by_its_url_with_the_password_masked():
    pytest.importorskip("sqlalchemy")
    source = _source(
        {"type": "sql", "url": "postgresql://sync:hunter2@db.example.com/erp", "table": "items"}
    )
    assert "hunter2" not in source.name
    assert source.name.startswith("postgresql://sync:")
    assert source.name.endswith("@db.example.com/erp")


def test_skip_if_empty_keeps_the_inner_sources_name(tmp_path: Path):
    source = _source(
        {"type": "csv", "path": str(tmp_path / "shopify.csv"), "skip_if_empty": ["Variant SKU"]}
    )
    assert type(source).__name__ != "CsvSource"  # the wrapper...
    assert source.name == "shopify.csv"  # ...named as what it wraps


def test_the_mapping_pieces_keep_the_sources_name(tmp_path: Path) -> None:
    (tmp_path / "catalog.csv").write_text("SKU,Name\nA-1,One\n", encoding="utf-8")
    settings = settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "test-key"},
            "source": {"type": "csv", "path": "catalog.csv", "where": "SKU != ''"},
            "mapping": {"fields": {"sku": "SKU", "name": "Name"}},
            "state": {"path": "state.db"},
        },
        base_dir=tmp_path,
    )
    with ExitStack() as stack:
        source, _tables = open_pieces(settings, stack)
        assert isinstance(source, Pieces)
        assert source.name == "catalog.csv"
