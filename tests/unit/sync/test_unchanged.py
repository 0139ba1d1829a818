"""An unchanged source costs a stat: the fingerprint check before reading (sync/skip.py).

A real CSV file behind a source that counts its reads, in-process against the fake API:
a second run on the untouched file reads nothing; a touched file is read again and writes
nothing; anything pending (an open intent, a failed row), --full, --verify, a dry run or
a config change forces the read.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skuferry import errors
from skuferry.config.schema import Settings
from skuferry.models import BadRecord, Product, RawRecord, RunOptions, RunSummary
from skuferry.sources import change_token as change_tokens
from skuferry.sources.base import Source
from skuferry.sources.change_token import file_change_token
from skuferry.sources.csv import CsvSource
from skuferry.state.mirror import Mirror
from skuferry.sync import skip
from skuferry.sync.engine import Adapters, run_once
from tests.fakes import FakeRemote
from tests.unit.sync.test_engine import make_settings


class CountingSource(Source):
    """The real CSV source, counting how often its records are read."""

    def __init__(self, path: Path) -> None:
        self.inner = CsvSource(path)
        self.reads = 0

    def describe(self) -> str:
        return self.inner.describe()

    def change_token(self, previous: str | None = None) -> str | None:
        return self.inner.change_token(previous)

    def records(self) -> Iterator[RawRecord | BadRecord]:
        self.reads += 1
        return self.inner.records()


def _write(path: Path, n: int, *, price: str = "1.00") -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle)
        out.writerow(["sku", "name", "price"])
        out.writerows([f"SKU-{i:03d}", f"Product {i}", price] for i in range(n))
    return path


@pytest.fixture(autouse=True)
def _no_racy_window(monkeypatch: pytest.MonkeyPatch) -> None:
    # The files here are seconds old; the racy window is tested on its own below.
    monkeypatch.setattr(change_tokens, "RACY_S", 0.0)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Settings, FakeRemote, CountingSource]:
    settings = make_settings(tmp_path, api={"auth_check_minutes": 0})
    source = CountingSource(_write(tmp_path / "catalog.csv", 20))
    return settings, FakeRemote(), source


def _sync(settings: Settings, remote: FakeRemote, source: Source, **flags: Any) -> RunSummary:
    return run_once(settings, RunOptions(**flags), adapters=Adapters(source=source, client=remote))


def test_a_second_run_on_an_untouched_file_reads_nothing(
    setup: tuple[Settings, FakeRemote, CountingSource],
) -> None:
    settings, remote, source = setup
    first = _sync(settings, remote, source)
    assert (first.created, first.pull) == (20, "full")
    before = dict(remote.requests)
    second = _sync(settings, remote, source)
    assert source.reads == 1, "the untouched file was read again"
    assert second.pull == "unchanged"
    assert second.unchanged == 20, "a skipped run repeats the standing counts"
    assert second.exit_code == 0
    assert any("source unchanged" in note for note in second.notes)
    assert remote.requests == before
    assert second.as_json()["pull"] == "unchanged"


def test_a_touched_file_is_read_again_and_writes_nothing(
    setup: tuple[Settings, FakeRemote, CountingSource],
) -> None:
    settings, remote, source = setup
    _sync(settings, remote, source)
    before = dict(remote.requests)
    stat = source.inner.path.stat()
    os.utime(source.inner.path, ns=(stat.st_atime_ns, stat.st_mtime_ns - 5_000_000_000))
    again = _sync(settings, remote, source)
    assert source.reads == 2
    assert (again.pull, again.unchanged, again.updated) == ("full", 20, 0)
    assert remote.requests == before, "same content: nothing written"
    assert _sync(settings, remote, source).pull == "unchanged", "and then it is known again"
    assert source.reads == 2


def test_a_changed_file_is_read_and_its_change_sent(
    setup: tuple[Settings, FakeRemote, CountingSource],
) -> None:
    settings, remote, source = setup
    _sync(settings, remote, source)
    _write(source.inner.path, 20, price="2.00")
    changed = _sync(settings, remote, source, force=True)
    assert (source.reads, changed.updated) == (2, 20)


def test_an_open_intent_forces_the_read(
    setup: tuple[Settings, FakeRemote, CountingSource],
) -> None:
    settings, remote, source = setup
    _sync(settings, remote, source)
    mirror = Mirror(settings.state.path)
    try:  # a create in doubt from a crashed run, as the journal leaves it
        mirror.open_intent(Product("SKU-NEW", {"sku": "SKU-NEW"}, "d" * 64, 2), run_id=None)
    finally:
        mirror.close()
    _sync(settings, remote, source)
    assert source.reads == 2, "an open intent must be settled by a run that reads"


def test_a_failed_product_forces_the_read(
    setup: tuple[Settings, FakeRemote, CountingSource],
) -> None:
    settings, remote, source = setup
    _sync(settings, remote, source)
    mirror = Mirror(settings.state.path)
    try:
        mirror.record_failed("SKU-003", "HTTP 503")
    finally:
        mirror.close()
    retried = _sync(settings, remote, source)
    assert source.reads == 2
    assert retried.pull == "full"


@pytest.mark.parametrize("flag", ["full", "verify"])
def test_full_and_verify_always_read(
    setup: tuple[Settings, FakeRemote, CountingSource], flag: str
) -> None:
    settings, remote, source = setup
    _sync(settings, remote, source)
    _sync(settings, remote, source, **{flag: True})
    assert source.reads == 2
    assert _sync(settings, remote, source).pull == "unchanged", "and store the fingerprint again"


def test_a_dry_run_always_plans_and_stores_nothing(
    setup: tuple[Settings, FakeRemote, CountingSource],
) -> None:
    settings, remote, source = setup
    _sync(settings, remote, source)
    planned = _sync(settings, remote, source, dry_run=True)
    assert (source.reads, planned.pull, planned.unchanged) == (2, "full", 20)


def test_a_config_change_forces_the_read(
    setup: tuple[Settings, FakeRemote, CountingSource], tmp_path: Path
) -> None:
    settings, remote, source = setup
    _sync(settings, remote, source)
    other = make_settings(tmp_path, api={"auth_check_minutes": 0, "max_in_flight": 2})
    assert skip.identity(other) != skip.identity(settings)
    _sync(other, remote, source)
    assert source.reads == 2


def test_a_failing_run_leaves_no_fingerprint(
    setup: tuple[Settings, FakeRemote, CountingSource],
) -> None:
    settings, remote, source = setup
    _sync(settings, remote, source)
    _write(source.inner.path, 20, price="3.00")

    def unavailable(kind: str, _payload: dict[str, Any]) -> None:
        if kind == "update":
            raise errors.HttpError(503, "UNAVAILABLE", "down for maintenance")

    remote.pre = unavailable
    failed = _sync(settings, remote, source, force=True)
    assert failed.failed
    remote.pre = None
    again = _sync(settings, remote, source, force=True)
    assert source.reads == 3, "a run with failed writes stores no fingerprint"
    assert again.updated == failed.failed


def _check_due(tmp_path: Path) -> tuple[Settings, FakeRemote, CountingSource]:
    """A synced catalog whose last contact with the API is older than the auth check's."""
    settings = make_settings(tmp_path, api={"auth_check_minutes": 1})
    remote, source = FakeRemote(), CountingSource(_write(tmp_path / "catalog.csv", 5))
    _sync(settings, remote, source)
    mirror = Mirror(settings.state.path)
    try:  # the last contact with the API, two minutes ago
        mirror.record_api_contact((mirror.last_api_contact() or 0.0) - 120)
    finally:
        mirror.close()
    return settings, remote, source


def test_the_auth_check_still_runs_on_a_skipped_run(tmp_path: Path) -> None:
    settings, remote, source = _check_due(tmp_path)
    reads = remote.requests["read"]
    skipped = _sync(settings, remote, source)
    assert (skipped.pull, source.reads) == ("unchanged", 1)
    assert remote.requests["read"] == reads + 1, "one authenticated read, as after any quiet run"


def test_a_429_on_the_auth_check_of_a_skipped_run_is_counted(tmp_path: Path) -> None:
    settings, remote, source = _check_due(tmp_path)
    remote.rate_limited = 1  # the client retried the check's read after one 429
    skipped = _sync(settings, remote, source)
    assert (skipped.pull, source.reads) == ("unchanged", 1)
    assert skipped.rate_limited == 1, "the summary and metrics see the 429 of the check"


def test_rejected_rows_are_reported_again_by_a_skipped_run(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, api={"auth_check_minutes": 0})
    path = _write(tmp_path / "catalog.csv", 3)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(",no key,1.00\n")
    remote, source = FakeRemote(), CountingSource(path)
    first = _sync(settings, remote, source)
    second = _sync(settings, remote, source)
    assert source.reads == 1
    assert (second.rejected, second.exit_code) == (first.rejected, first.exit_code) == (1, 1)
    assert second.problems == first.problems


# -- the change token itself -----------------------------------------------------------------


def test_a_file_change_token_is_its_stat(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.csv", 2)
    first = file_change_token(path)
    assert first is not None and first == file_change_token(path)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert file_change_token(path) != first, "a touch is a change (then read, nothing written)"
    replaced = _write(tmp_path / "b.csv", 2)
    replaced.replace(path)
    assert file_change_token(path) != first, "a new inode is a change"
    assert file_change_token(tmp_path / "missing.csv") is None


def test_a_file_changed_within_the_racy_window_has_no_change_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(change_tokens, "RACY_S", 2.0)
    path = _write(tmp_path / "a.csv", 2)
    stat = path.stat()
    changed = max(stat.st_mtime_ns, stat.st_ctime_ns)
    assert file_change_token(path, now_ns=changed + 1_000_000_000) is None
    assert file_change_token(path, now_ns=changed + 3_000_000_000) is not None


def test_a_changed_join_file_forces_the_read(tmp_path: Path) -> None:
    pim = tmp_path / "pim.jsonl"
    pim.write_text('{"sku": "SKU-001", "color": "red"}\n', encoding="utf-8")
    join = {"name": "pim", "type": "jsonl", "path": str(pim), "key": "sku", "on": "sku"}
    settings = make_settings(tmp_path, api={"auth_check_minutes": 0}, join=[join])
    remote, source = FakeRemote(), CountingSource(_write(tmp_path / "catalog.csv", 5))
    _sync(settings, remote, source)
    assert _sync(settings, remote, source).pull == "unchanged"
    pim.write_text('{"sku": "SKU-001", "color": "blue"}\n', encoding="utf-8")
    assert _sync(settings, remote, source).pull == "full", "the join changed: read again"
    assert source.reads == 2


def test_the_incremental_pull_identity_covers_joins(tmp_path: Path) -> None:
    """A changed [[join]] config changes what a record is: the next pull is full (the
    watermark's identity differs); a config without joins keeps its identity."""
    from skuferry import canonical
    from skuferry.sync.read.incremental import config_identity

    pim = {"name": "pim", "type": "jsonl", "path": str(tmp_path / "pim.jsonl"), "key": "sku"}
    plain = make_settings(tmp_path)
    joined = make_settings(tmp_path, join=[{**pim, "on": "sku"}])
    moved = make_settings(tmp_path, join=[{**pim, "on": "SKU"}])
    identities = {config_identity(s) for s in (plain, joined, moved)}
    assert len(identities) == 3
    assert config_identity(moved) == config_identity(
        make_settings(tmp_path, join=[{**pim, "on": "SKU"}])
    )
    source = plain.source.model_dump(mode="json", exclude={"full_every", "since_overlap_s"})
    before = {"source": source, "mapping": plain.mapping.model_dump(mode="json")}
    import hashlib

    assert (
        config_identity(plain) == hashlib.sha256(canonical.dumps(before).encode()).hexdigest()[:16]
    )
