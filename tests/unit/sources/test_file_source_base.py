"""What the four file sources share (``FileSource``): name, change token, opening.

CSV, JSON Lines, XML and XLSX are each built from their ``[source]`` table as a run
builds them, so a format that stopped sharing the base, or a wrapper that stopped
passing its inner source's token on, fails here for every format at once.
"""

from __future__ import annotations

import gc
import gzip
import os
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

from skuferry.config.schema import SourceSettings
from skuferry.errors import SourceError
from skuferry.models import RawRecord
from skuferry.sandbox.catalog_files import write_xlsx
from skuferry.sources import change_token as change_tokens
from skuferry.sources.base import Source
from skuferry.sources.change_token import file_change_token
from skuferry.sources.dispatch import open_source

SOURCES: TypeAdapter[SourceSettings] = TypeAdapter(SourceSettings)


def _csv(path: Path) -> None:
    path.write_bytes(b"sku,name\nA-1,Anvil\nB-2,Bucket\n")


def _jsonl(path: Path) -> None:
    path.write_bytes(b'{"sku": "A-1", "name": "Anvil"}\n{"sku": "B-2", "name": "Bucket"}\n')


def _xml(path: Path) -> None:
    path.write_bytes(
        b"<CATALOG><ARTICLE><sku>A-1</sku><name>Anvil</name></ARTICLE>"
        b"<ARTICLE><sku>B-2</sku><name>Bucket</name></ARTICLE></CATALOG>"
    )


def _xlsx(path: Path) -> None:
    write_xlsx(path, {"Products": [["sku", "name"], ["A-1", "Anvil"], ["B-2", "Bucket"]]})


WRITERS: dict[str, Callable[[Path], None]] = {
    "csv": _csv,
    "jsonl": _jsonl,
    "xml": _xml,
    "xlsx": _xlsx,
}
KINDS = list(WRITERS)


def _source(kind: str, path: Path, **table: Any) -> Source:
    extra = {"record": "ARTICLE"} if kind == "xml" else {}
    return open_source(SOURCES.validate_python({"type": kind, "path": str(path), **extra, **table}))


def _written(tmp_path: Path, kind: str, name: str | None = None) -> Path:
    path = tmp_path / (name or f"catalog.{kind}")
    WRITERS[kind](path)
    return path


def _skus(source: Source) -> list[str]:
    return [str(r.fields["sku"]) for r in source.records() if isinstance(r, RawRecord)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_file_sources_change_token_is_its_files_stat(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(change_tokens, "RACY_S", 0.0)  # the file is milliseconds old
    path = _written(tmp_path, kind)
    source = _source(kind, path)
    first = source.change_token()
    assert first is not None and first == file_change_token(path)
    assert source.change_token("an earlier token") == first, "a local file needs none"
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert source.change_token() != first, "a touch is a change"
    assert _skus(source) == ["A-1", "B-2"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_fresh_file_has_no_change_token(tmp_path: Path, kind: str) -> None:
    # written just now: within the racy window, so it is read whatever its stat says
    assert _source(kind, _written(tmp_path, kind)).change_token() is None


@pytest.mark.parametrize("kind", KINDS)
def test_the_wrappers_keep_the_files_name_and_token(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(change_tokens, "RACY_S", 0.0)
    path = _written(tmp_path, kind)
    ready = tmp_path / "catalog.done"
    ready.write_text("")
    source = _source(kind, path, ready_file=str(ready), skip_if_empty=["name"])
    assert type(source).__name__ == "SkipEmptyRows"
    assert source.name == path.name
    assert source.describe() == str(path)
    assert source.change_token() == file_change_token(path) is not None
    assert _skus(source) == ["A-1", "B-2"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_gzipped_file_is_read_as_the_file(tmp_path: Path, kind: str) -> None:
    plain = _written(tmp_path, kind)
    packed = tmp_path / f"catalog.{kind}.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    source = _source(kind, packed)
    assert _skus(source) == ["A-1", "B-2"]
    assert source.name == packed.name


@pytest.mark.parametrize("kind", KINDS)
def test_a_cut_short_archive_fails_the_read_naming_the_file(tmp_path: Path, kind: str) -> None:
    plain = _written(tmp_path, kind)
    packed = tmp_path / f"catalog.{kind}.gz"
    whole = gzip.compress(plain.read_bytes())
    packed.write_bytes(whole[: len(whole) - 12])  # the trailer and the last block's end
    with pytest.raises(SourceError) as info:
        _skus(_source(kind, packed))
    assert str(info.value).startswith(f"reading {packed} failed: ")
    assert "truncated or corrupt" in str(info.value)


@pytest.mark.parametrize(
    ("kind", "said"),
    [("csv", "cannot open"), ("jsonl", "cannot open"), ("xml", "cannot open"),
     ("xlsx", "reading")],
)  # fmt: skip
def test_a_missing_file_fails_the_read_naming_it(tmp_path: Path, kind: str, said: str) -> None:
    path = tmp_path / f"gone.{kind}"
    with pytest.raises(SourceError) as info:
        _skus(_source(kind, path))
    assert str(info.value).startswith(f"{said} {path}")
    assert "No such file or directory" in str(info.value)


@pytest.mark.parametrize("kind", ["csv", "jsonl", "xml"])
def test_stopping_early_closes_the_file(tmp_path: Path, kind: str) -> None:
    # filterwarnings=error turns an unclosed file's ResourceWarning into a failure.
    plain = _written(tmp_path, kind)
    packed = tmp_path / f"catalog.{kind}.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    stream = _source(kind, packed).records()
    assert isinstance(stream, Generator)
    first = next(stream)
    assert isinstance(first, RawRecord) and first.fields["sku"] == "A-1"
    stream.close()
    gc.collect()


def test_the_token_is_written_as_state_files_already_hold_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A state file stores the token a committed run took: a token written otherwise
    # would make the first run after an upgrade read everything again.
    monkeypatch.setattr(change_tokens, "RACY_S", 0.0)
    path = _written(tmp_path, "csv")
    st = path.stat()
    assert _source("csv", path).change_token() == (
        f"file:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}:{st.st_dev}"
    )
