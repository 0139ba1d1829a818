"""``[source] ready_file``: an export is read only once its exporter's trigger file says it
is whole; one older than the export does not count; if it never comes the run reads
nothing and exits 75; an export rewritten while it is read fails the pull."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from skuferry import errors
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import Settings
from skuferry.service.watch import watched_files
from skuferry.sources.dispatch import open_source
from skuferry.sources.ready import ReadyGate
from skuferry.sync.engine import Adapters, run_once
from tests.fakes import FakeRemote

CSV = "sku,name\nA-1,Anvil\nB-2,Bucket\n"


def _settings(tmp_path: Path, **source: Any) -> Settings:
    return settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k-test"},
            "source": {"type": "csv", "path": str(tmp_path / "catalog.csv"), **source},
            "mapping": {"key": "sku", "fields": {"sku": "sku", "name": "name"}},
            "state": {"path": str(tmp_path / "state.db")},
        }
    )


def _age(path: Path, seconds: float) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - int(seconds * 1e9)))


def test_no_ready_file_reads_nothing_and_exits_75(tmp_path: Path) -> None:
    (tmp_path / "catalog.csv").write_text(CSV)
    ready = tmp_path / "catalog.csv.done"
    settings = _settings(tmp_path, ready_file=str(ready), ready_timeout_s=0)
    remote = FakeRemote()
    with pytest.raises(errors.SourceNotReady) as caught:
        run_once(settings, adapters=Adapters(client=remote))
    assert caught.value.exit_code == errors.EXIT_TEMPFAIL == 75
    assert "catalog.csv.done did not come" in str(caught.value)
    assert remote.keys() == []


def test_a_ready_file_older_than_the_export_does_not_count(tmp_path: Path) -> None:
    export = tmp_path / "catalog.csv"
    ready = tmp_path / "catalog.csv.done"
    ready.write_text("")
    export.write_text(CSV)
    _age(ready, 5)  # the previous export's trigger: the new one is being written
    settings = _settings(tmp_path, ready_file=str(ready), ready_timeout_s=0)
    with pytest.raises(errors.SourceNotReady, match="is older than the export"):
        run_once(settings, adapters=Adapters(client=FakeRemote()))
    ready.touch()
    summary = run_once(settings, adapters=Adapters(client=(remote := FakeRemote())))
    assert summary.created == 2 and sorted(remote.keys()) == ["A-1", "B-2"]


def test_the_run_waits_for_the_ready_file(tmp_path: Path) -> None:
    export = tmp_path / "catalog.csv"
    ready = tmp_path / "catalog.csv.done"
    export.write_text(CSV[:14])  # the exporter is still writing
    gate = ReadyGate(export, ready, timeout_s=30, poll_s=0.01)
    done = threading.Event()

    def exporter() -> None:
        export.write_text(CSV)
        ready.touch()
        done.set()

    timer = threading.Timer(0.2, exporter)
    timer.start()
    try:
        gate.wait()
    finally:
        timer.cancel()
    assert done.is_set()  # it returned only after the exporter finished
    gate.after()


def test_an_export_rewritten_while_read_fails_the_pull(tmp_path: Path) -> None:
    export = tmp_path / "catalog.csv"
    ready = tmp_path / "catalog.csv.done"
    export.write_text(CSV)
    ready.touch()
    source = open_source(_settings(tmp_path, ready_file=str(ready)).source)
    records = source.records()
    next(records)
    export.write_text(CSV + "C-3,Crate\n")  # the next export begins
    with pytest.raises(errors.SourceError, match="changed while it was read"):
        list(records)


def test_a_stop_ends_the_wait(tmp_path: Path) -> None:
    stop = threading.Event()
    stop.set()
    gate = ReadyGate(tmp_path / "c.csv", tmp_path / "c.done", timeout_s=60, stop=stop)
    with pytest.raises(errors.Interrupted):
        gate.wait()


def test_the_line_route_waits_too(tmp_path: Path) -> None:
    # a plain CSV with a column mapping takes the line route: the gate holds there as well
    (tmp_path / "catalog.csv").write_text(CSV)
    settings = _settings(tmp_path, ready_file="catalog.csv.ok", ready_timeout_s=0)
    with pytest.raises(errors.SourceNotReady):
        run_once(settings, adapters=Adapters(client=FakeRemote()))


def test_the_watch_watches_the_ready_file(tmp_path: Path) -> None:
    settings = _settings(tmp_path, ready_file=str(tmp_path / "catalog.csv.done"))
    assert watched_files(settings) == [tmp_path / "catalog.csv", tmp_path / "catalog.csv.done"]


def test_ready_file_is_for_local_paths(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError, match="ready_file only applies to a local path"):
        settings_from_dict(
            {
                "api": {"base_url": "http://127.0.0.1:9", "api_key": "k-test"},
                "source": {
                    "type": "csv",
                    "path": "https://example.com/c.csv",
                    "ready_file": "/tmp/c.done",
                },
                "mapping": {"key": "sku"},
                "state": {"path": str(tmp_path / "state.db")},
            }
        )
