"""``skuferry status`` as a person reads it: the oldest change in words, a run per line."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from skuferry.service import freshness
from skuferry.service.report import collect_status, print_status
from skuferry.state.mirror import Mirror
from skuferry.sync.read import incremental
from tests.unit.service.test_daemon import make_settings


def seeded(tmp_path: Path, runs: int = 3) -> Path:
    settings = make_settings(tmp_path)
    mirror = Mirror(settings.state.path)
    try:
        for i in range(runs):
            run = mirror.start_run()
            summary: dict[str, Any] = {"created": 1000 * i, "updated": 12345, "rejected": 7}
            summary |= {"failed": 0, "duration_s": 123.4}
            mirror.finish_run(run, status="partial", exit_code=1, summary=summary)
    finally:
        mirror.close()
    return settings.state.path


def test_status_at_80_columns_keeps_each_run_s_start_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 40 item 22: the "started" date wrapped onto two lines."""
    monkeypatch.setenv("COLUMNS", "80")
    seeded(tmp_path)
    print_status(collect_status(make_settings(tmp_path)))
    out = capsys.readouterr().out
    today = time.strftime("%Y-%m-%d")
    table = out.split("last runs")[1].splitlines()[1:]
    assert table[0].split() == [
        "id",
        "started",
        "status",
        "exit",
        "created",
        "updated",
        "rejected",
        "failed",
        "s",
    ], "no header cut"
    dated = [line for line in table if today in line]
    assert len(dated) == 3 == len(table) - 1, out
    assert all(len(line) <= 80 for line in table)
    for line in dated:
        assert line.split(today + " ")[1][:8].count(":") == 2, "date and time on one line"


def test_status_says_what_the_oldest_change_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 40 item 3: a source file newer than the last full read (a hook may already have
    sent its product) is not worded as "not yet on the remote"."""
    settings = make_settings(tmp_path)
    seeded(tmp_path)
    source = Path(settings.source.path)  # type: ignore[union-attr]
    source.write_text("sku\n")
    mirror = Mirror(settings.state.path)
    try:
        mirror.set_meta(incremental.WATERMARK, "2020-01-01T00:00:00+00:00")
    finally:
        mirror.close()
    data = collect_status(settings)
    assert data["freshness"]["oldest_unsynced_change_kind"] == freshness.SOURCE_CHANGED
    print_status(data)
    out = capsys.readouterr().out
    assert "not yet on the remote" not in out
    assert "oldest change the CMS may not have yet: " in out
    assert "the source file changed after the last full read: the next run reads it" in out
    mirror = Mirror(settings.state.path)
    try:
        mirror.set_meta(incremental.UNSYNCED_SINCE, str(time.time() - 3600))
    finally:
        mirror.close()
    print_status(collect_status(settings))
    assert "a run's writes are not all on the CMS yet: the next run sends them" in (
        capsys.readouterr().out
    )
