"""``sync --workspaces``: every workspace once, each failure named under its workspace."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

from skuferry import errors, logs
from skuferry.config.schema import Settings
from skuferry.models import RunOptions, RunSummary
from skuferry.service import fleet_sync
from tests.unit.service.test_daemon import make_settings


def test_each_workspace_runs_once_and_a_failure_is_its_own_result(tmp_path: Path) -> None:
    for name in ("acme", "bolt", "broken"):
        (tmp_path / f"{name}.toml").write_text("")

    def load(path: Path | None) -> Settings:
        assert path is not None
        if path.stem == "broken":
            raise errors.ConfigError([f"{path}: at 'api': missing"])
        return make_settings(tmp_path / path.stem)

    def run(settings: Settings, options: RunOptions, stop: threading.Event) -> RunSummary:
        if settings.metrics.labels["workspace"] == "bolt":
            raise errors.SourceError("the export is not there")
        return RunSummary()

    heard: list[str] = []
    out = io.StringIO()
    logs.configure(level="info", json=True, stream=out)
    results = fleet_sync.sync_all(
        tmp_path,
        RunOptions(dry_run=True),
        run=run,
        load=load,
        on_result=lambda r: heard.append(r.name),
    )

    assert [(r.name, r.exit_code) for r in results] == [
        ("acme", errors.EXIT_OK),
        ("bolt", errors.EXIT_UNAVAILABLE),
        ("broken", errors.EXIT_USAGE),
    ]
    assert sorted(heard) == ["acme", "bolt", "broken"]
    assert results[1].line() == "bolt: failed (exit 3): the export is not there"
    assert results[2].as_json() == {
        "error": f"the configuration has problems: {tmp_path / 'broken.toml'}: at 'api': missing",
        "exit_code": errors.EXIT_USAGE,
    }
    assert fleet_sync.worst([r.exit_code for r in results]) == errors.EXIT_USAGE
    finished = [
        e
        for e in map(json.loads, out.getvalue().splitlines())
        if e["event"] == "fleet.sync.finished"
    ]
    # the fleet's events keep the logger name operators' queries know
    assert {(e["workspace"], e["logger"]) for e in finished} == {
        (name, "skuferry.service.fleet") for name in ("acme", "bolt", "broken")
    }


def test_a_dry_run_s_line_says_what_would_be_written_as_plan_does(tmp_path: Path) -> None:
    (tmp_path / "acme.toml").write_text("")

    def run(settings: Settings, options: RunOptions, stop: threading.Event) -> RunSummary:
        assert options.dry_run
        return RunSummary(created=30, updated=2, unchanged=5, dry_run=True)

    (result,) = fleet_sync.sync_all(
        tmp_path,
        RunOptions(dry_run=True),
        run=run,
        load=lambda _p: make_settings(tmp_path / "acme"),
    )
    line = result.line()
    assert line.startswith("acme: success (dry run, exit 0): 30 would be created, 2 would be ")
    assert "30 created" not in line
    assert "5 unchanged" in line, "what is not written keeps its name"
