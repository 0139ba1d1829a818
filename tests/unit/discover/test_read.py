"""The edge ``init`` reads through: compressed files, what it refuses, a sample's size."""

from __future__ import annotations

import gzip
import zipfile
from pathlib import Path

import pytest

from skuferry.discover import read
from skuferry.errors import UsageError
from tests.init_exports import write_german, write_jsonl, write_xlsx_export


def test_a_zip_holding_one_csv(tmp_path: Path) -> None:
    plain = write_german(tmp_path)
    zipped = tmp_path / "export.zip"
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.write(plain, "Artikel.csv")
    sample = read.sample(str(zipped), folder=tmp_path, env={})
    assert sample.source["type"] == "csv" and sample.source["delimiter"] == ";"
    assert sample.source["path"] == "export.zip"
    assert any(f.subject == "compression" and f.value == "zip" for f in sample.findings)
    assert sample.complete and len(sample.records) == 32


def test_a_gzipped_workbook(tmp_path: Path) -> None:
    book = write_xlsx_export(tmp_path)
    packed = tmp_path / "Sortiment.xlsx.gz"
    packed.write_bytes(gzip.compress(book.read_bytes()))
    sample = read.sample(str(packed), folder=tmp_path, env={})
    assert (sample.source["sheet"], sample.source["header_row"]) == ("Artikel", 3)


def test_only_a_sample_of_a_big_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    with path.open("w", encoding="utf-8") as out:
        out.write("sku;name;price\n")
        for i in range(200_000):
            out.write(f"K{i};Item {i};{i % 90},50\n")
    sample = read.sample(str(path), folder=tmp_path, env={}, limit=300)
    assert len(sample.records) == 300 and not sample.complete


def test_a_json_document_is_named_with_the_way_out(tmp_path: Path) -> None:
    path = tmp_path / "products.json"
    path.write_text('[{"sku": "a"}]', encoding="utf-8")
    with pytest.raises(UsageError, match="jq -c"):
        read.sample(str(path), folder=tmp_path, env={})


def test_a_missing_file_and_a_preset_without_its_url(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        read.sample(str(tmp_path / "nope.csv"), folder=tmp_path, env={})
    feed = write_jsonl(tmp_path)
    with pytest.raises(UsageError, match="must be its URL"):
        read.sample(str(feed), folder=tmp_path, env={}, preset="akeneo")


def test_a_preset_needs_its_secret_in_the_environment(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="SHOPIFY_TOKEN"):
        read.sample("http://127.0.0.1:9/", folder=tmp_path, env={}, preset="shopify")


def test_a_presets_table_takes_identifiers_from_the_environment() -> None:
    env = {"SKUFERRY_SOURCE__CLIENT_ID": "client-1"}
    table = read.preset_table("akeneo", "https://pim.example.com", env=env, given=None)
    assert table["client_id"] == "client-1"
    assert table["client_secret_env"] == "AKENEO_CLIENT_SECRET"
    assert read.missing_preset_keys("akeneo", table) == ["username"]
