"""The Prometheus textfile and the monitoring pings (against a real loopback HTTP listener)."""

from __future__ import annotations

import json
import socket
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from skuferry.config.schema import MonitorSettings
from skuferry.errors import AuthError, LockHeld, SourceError, SourceNotReady
from skuferry.models import RunSummary
from skuferry.service import metrics, monitor
from skuferry.service.metrics import RunOutcome, parse_samples, record_run


def summary(**kw: Any) -> RunSummary:
    return RunSummary(**kw)


def ok_outcome(**kw: Any) -> RunOutcome:
    s = summary(created=2, unchanged=5, requests={"read": 3, "write": 2}, rate_limited=1, **kw)
    return RunOutcome.from_summary(s, duration_s=1.5, finished_at=1_700_000_000.0)


# --- RunOutcome -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "code", "result"),
    [
        (LockHeld("held"), 75, "locked"),
        # issue 40 item 15: a ready_file that never came is not a held lock
        (SourceNotReady("catalog.csv.done did not come within 600 s"), 75, "not_ready"),
        (AuthError(401, "UNAUTHORIZED", "bad key"), 3, "failed"),
        (SourceError("gone"), 3, "failed"),
        (ValueError("bug"), 70, "failed"),
    ],
)
def test_outcome_from_error(exc: Exception, code: int, result: str) -> None:
    outcome = RunOutcome.from_error(exc, duration_s=0.1, finished_at=1.0)
    assert (outcome.exit_code, outcome.result, outcome.error) == (code, result, str(exc))
    assert not outcome.completed


def test_outcome_from_summary() -> None:
    assert ok_outcome().exit_code == 0
    partial = RunOutcome.from_summary(summary(rejected=1), duration_s=0, finished_at=0)
    assert (partial.exit_code, partial.result, partial.completed) == (1, "partial", True)
    cut = RunOutcome.from_summary(summary(interrupted=True), duration_s=0, finished_at=0)
    assert (cut.exit_code, cut.result, cut.completed) == (130, "interrupted", False)
    assert ok_outcome().one_line().startswith("success (exit 0): 2 created")


# --- the textfile ---------------------------------------------------------------------


def test_textfile_has_help_type_and_every_family(tmp_path: Path) -> None:
    path = tmp_path / "skuferry.prom"
    assert record_run(path, ok_outcome(), products={"synced": 7, "rejected": 1})
    text = path.read_text()
    for name, kind in [
        ("skuferry_runs_total", "counter"),
        ("skuferry_products", "gauge"),
        ("skuferry_requests_total", "counter"),
        ("skuferry_rate_limited_total", "counter"),
        ("skuferry_last_run_duration_seconds", "gauge"),
        ("skuferry_last_success_timestamp_seconds", "gauge"),
        ("skuferry_last_run_exit_code", "gauge"),
    ]:
        assert f"# TYPE {name} {kind}\n" in text
        assert f"# HELP {name} " in text
    samples = parse_samples(text)
    assert samples[("skuferry_runs_total", "success")] == 1
    assert samples[("skuferry_runs_total", "failed")] == 0  # every result present, for rate()
    assert samples[("skuferry_products", "synced")] == 7
    assert samples[("skuferry_requests_total", "write")] == 2
    assert samples[("skuferry_rate_limited_total", None)] == 1
    assert samples[("skuferry_last_run_duration_seconds", None)] == 1.5
    assert samples[("skuferry_last_success_timestamp_seconds", None)] == 1_700_000_000
    assert samples[("skuferry_last_run_exit_code", None)] == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # node_exporter runs as another user


def test_counters_accumulate_across_runs_and_failures_keep_last_success(tmp_path: Path) -> None:
    path = tmp_path / "skuferry.prom"
    record_run(path, ok_outcome(), products={"synced": 7})
    record_run(path, ok_outcome(), products={"synced": 9})
    failed = RunOutcome.from_error(SourceError("x"), duration_s=0.2, finished_at=1_800_000_000.0)
    record_run(path, failed)  # no fresh product counts
    samples = parse_samples(path.read_text())
    assert samples[("skuferry_runs_total", "success")] == 2
    assert samples[("skuferry_runs_total", "failed")] == 1
    assert samples[("skuferry_requests_total", "read")] == 6
    assert samples[("skuferry_rate_limited_total", None)] == 2
    assert samples[("skuferry_products", "synced")] == 9  # carried forward
    assert samples[("skuferry_last_success_timestamp_seconds", None)] == 1_700_000_000
    assert samples[("skuferry_last_run_exit_code", None)] == 3


def test_rows_rejected_at_the_source_are_counted_last_run_and_in_all(tmp_path: Path) -> None:
    path = tmp_path / "skuferry.prom"
    for rows in (3, 2):
        run = summary(rejected=rows + 1, rows_rejected=rows)
        record_run(path, RunOutcome.from_summary(run, duration_s=1.0, finished_at=1.0))
    samples = parse_samples(path.read_text())
    assert samples[("skuferry_rows_rejected", None)] == 2
    assert samples[("skuferry_rows_rejected_total", None)] == 5
    failed = RunOutcome.from_error(SourceError("x"), duration_s=0.2, finished_at=1_800_000_000.0)
    record_run(path, failed)  # read nothing: the last count stays, the total goes on
    samples = parse_samples(path.read_text())
    assert samples[("skuferry_rows_rejected", None)] == 2
    assert samples[("skuferry_rows_rejected_total", None)] == 5


def test_first_run_failing_has_no_last_success(tmp_path: Path) -> None:
    path = tmp_path / "m.prom"
    record_run(path, RunOutcome.from_error(SourceError("x"), duration_s=0, finished_at=5.0))
    assert "skuferry_last_success_timestamp_seconds" not in path.read_text()


def test_label_values_are_escaped_and_read_back() -> None:
    text = metrics.render({}, ok_outcome(), {'we"ird\\state': 1})
    assert 'state="we\\"ird\\\\state"' in text
    assert parse_samples(text)[("skuferry_products", 'we"ird\\state')] == 1


def test_replace_is_atomic_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "skuferry.prom"
    record_run(path, ok_outcome())
    inode = path.stat().st_ino
    record_run(path, ok_outcome())
    assert path.stat().st_ino != inode  # a new file renamed over the old, never rewritten in place
    assert [p.name for p in tmp_path.iterdir()] == ["skuferry.prom"]


def test_failed_write_keeps_the_old_file_and_does_not_raise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "skuferry.prom"
    record_run(path, ok_outcome())
    before = path.read_text()

    def broken_replace(self: Path, target: Path) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "replace", broken_replace)
    with capture_logs() as logs:
        assert not record_run(path, ok_outcome())
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["skuferry.prom"]
    assert logs[-1]["event"] == "metrics.write.failed"


def test_missing_directory_is_logged_not_raised(tmp_path: Path) -> None:
    with capture_logs() as logs:
        assert not record_run(tmp_path / "nope" / "m.prom", ok_outcome())
    assert logs[-1]["event"] == "metrics.write.failed"


# --- pings ------------------------------------------------------------------------------


@dataclass
class Listener:
    base: str
    hits: list[tuple[str, bytes]] = field(default_factory=list)
    status: int = 200


@pytest.fixture
def listener() -> Iterator[Listener]:
    state = Listener(base="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            state.hits.append((self.path, self.rfile.read(length)))
            self.send_response(state.status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def settings_for(base: str) -> MonitorSettings:
    return MonitorSettings(
        start_url=f"{base}/ping/SECRET-UUID/start",
        success_url=f"{base}/ping/SECRET-UUID",
        failure_url=f"{base}/ping/SECRET-UUID/fail",
        timeout_s=5,
    )


@pytest.mark.integration
def test_start_and_success_pings_carry_the_summary(listener: Listener) -> None:
    cfg = settings_for(listener.base)
    assert monitor.ping_start(cfg)
    assert monitor.ping_finish(cfg, ok_outcome())
    (start_path, start_body), (done_path, done_body) = listener.hits
    assert (start_path, start_body) == ("/ping/SECRET-UUID/start", b"")
    assert done_path == "/ping/SECRET-UUID"
    body = json.loads(done_body)
    assert body["exit_code"] == 0
    assert body["summary"]["created"] == 2
    assert body["summary"]["requests"] == {"read": 3, "write": 2}


@pytest.mark.integration
def test_failure_ping_carries_error_and_exit_code(listener: Listener) -> None:
    outcome = RunOutcome.from_error(
        AuthError(401, "UNAUTHORIZED", "bad key"), duration_s=0.1, finished_at=1.0
    )
    assert monitor.ping_finish(settings_for(listener.base), outcome)
    path, raw = listener.hits[0]
    assert path == "/ping/SECRET-UUID/fail"
    body = json.loads(raw)
    assert body["exit_code"] == 3
    assert "UNAUTHORIZED" in body["error"]


@pytest.mark.integration
def test_partial_run_pings_failure_and_lock_pings_success(listener: Listener) -> None:
    cfg = settings_for(listener.base)
    partial = RunOutcome.from_summary(summary(rejected=1), duration_s=0, finished_at=0)
    locked = RunOutcome.from_error(LockHeld("held"), duration_s=0, finished_at=0)
    monitor.ping_finish(cfg, partial)
    monitor.ping_finish(cfg, locked)
    assert [p for p, _ in listener.hits] == ["/ping/SECRET-UUID/fail", "/ping/SECRET-UUID"]


def test_long_problem_lists_are_cut() -> None:
    problems = [{"key": str(i), "line": i, "reason": "bad"} for i in range(50)]
    body = monitor.ping_body(
        RunOutcome.from_summary(
            summary(rejected=50, problems=problems), duration_s=0, finished_at=0
        )
    )
    assert len(body["summary"]["problems"]) == monitor.MAX_PROBLEMS
    assert body["summary"]["problems_omitted"] == 50 - monitor.MAX_PROBLEMS


@pytest.mark.integration
def test_error_status_is_logged_not_raised_and_url_secret_not_logged(listener: Listener) -> None:
    listener.status = 500
    with capture_logs() as logs:
        assert not monitor.ping_finish(settings_for(listener.base), ok_outcome())
    (event,) = [e for e in logs if e["event"] == "monitor.ping.failed"]
    assert event["status"] == 500
    assert "SECRET-UUID" not in repr(logs)


def test_unreachable_monitor_is_logged_not_raised() -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nobody listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with capture_logs() as logs:
        assert not monitor.ping_start(settings_for(f"http://127.0.0.1:{port}"))
    assert [e["event"] for e in logs] == ["monitor.ping.failed"]


def test_bad_url_is_logged_not_raised() -> None:
    with capture_logs() as logs:
        assert not monitor.ping_start(MonitorSettings(start_url="not a url"))
    assert logs[0]["event"] == "monitor.ping.failed"


@pytest.mark.integration
def test_no_urls_no_requests(listener: Listener) -> None:
    assert not monitor.ping_start(MonitorSettings())
    assert not monitor.ping_finish(MonitorSettings(), ok_outcome())
    assert listener.hits == []


# --- prometheus_client, continuity with 0.2.0's files, constant labels --------------------

# Written by 0.2.0's hand-rendered exposition (four runs: success, partial, a StateError,
# a SourceError; two API keys; archived and restored products; a budget and freshness).
FILE_0_2_0 = Path(__file__).resolve().parents[2] / "data" / "metrics-0.2.0.prom"


def all_samples(text: str) -> list[Any]:
    from prometheus_client.parser import text_string_to_metric_families

    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def test_counters_carry_on_from_a_textfile_written_by_0_2_0(tmp_path: Path) -> None:
    path = tmp_path / "skuferry.prom"
    path.write_bytes(FILE_0_2_0.read_bytes())
    before = parse_samples(path.read_text())
    assert before[("skuferry_runs_total", "failed")] == 2  # the fixture is what it says
    summary_ = summary(
        created=1, archived=1, requests={"read": 1, "write": 1}, requests_by_key={"1a2b3c4d": 2}
    )
    outcome = RunOutcome.from_summary(summary_, duration_s=3.0, finished_at=1_795_002_400.0)
    assert record_run(path, outcome)
    after = parse_samples(path.read_text())
    # every sample of the old file is still there, under the same name and label
    assert set(before) <= set(after)
    assert (
        after[("skuferry_runs_total", "success")] == before[("skuferry_runs_total", "success")] + 1
    )
    for result in ("failed", "partial", "locked", "interrupted"):
        assert after[("skuferry_runs_total", result)] == before[("skuferry_runs_total", result)]
    assert (
        after[("skuferry_requests_total", "read")]
        == before[("skuferry_requests_total", "read")] + 1
    )
    assert after[("skuferry_key_requests_total", "1a2b3c4d")] == 83 + 2
    assert after[("skuferry_key_requests_total", "9f8e7d6c")] == 46
    assert after[("skuferry_rate_limited_total", None)] == 5
    assert after[("skuferry_archived_total", None)] == 3
    assert after[("skuferry_restored_total", None)] == 1
    assert after[("skuferry_state_errors_total", None)] == 1
    assert after[("skuferry_products", "synced")] == 131  # no fresh counts: carried
    assert after[("skuferry_budget_per_minute", "write")] == 60
    assert after[("skuferry_last_full_pull_timestamp_seconds", None)] == 1_794_990_000
    assert after[("skuferry_last_success_timestamp_seconds", None)] == 1_795_002_400
    assert after[("skuferry_last_run_exit_code", None)] == 0
    # and the new file reads back to the same values: the next run carries on from it
    assert parse_samples(metrics.render(after, None, None)) == {
        k: v for k, v in after.items() if not k[0].startswith("skuferry_last_run_")
    }


def test_constant_labels_go_on_every_sample_and_counters_carry_on_across_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "skuferry.prom"
    path.write_bytes(FILE_0_2_0.read_bytes())  # written without labels
    record_run(path, ok_outcome(), products={"synced": 7}, labels={"workspace": "acme"})
    record_run(path, ok_outcome(), labels={"workspace": "acme", "team": "shops"})
    samples = all_samples(path.read_text())
    assert samples
    assert all(s.labels.get("workspace") == "acme" for s in samples)
    assert all(s.labels.get("team") == "shops" for s in samples)
    runs = {s.labels["result"]: s.value for s in samples if s.name == "skuferry_runs_total"}
    assert runs == {
        "success": 3,
        "partial": 1,
        "failed": 2,
        "locked": 0,
        "not_ready": 0,
        "interrupted": 0,
    }


def test_a_textfile_that_is_not_the_text_format_starts_the_counters_again(
    tmp_path: Path,
) -> None:
    path = tmp_path / "skuferry.prom"
    path.write_text('skuferry_runs_total{result="success" 12\n')
    with capture_logs() as logs:
        assert record_run(path, ok_outcome())
    assert any(e["event"] == "metrics.read.failed" for e in logs)
    assert parse_samples(path.read_text())[("skuferry_runs_total", "success")] == 1


def test_every_label_of_skuferry_s_own_is_refused_as_a_constant_label() -> None:
    """Config refuses a constant label that would clash: it knows every label the families use."""
    from skuferry.config.schema import METRIC_LABELS
    from skuferry.service.freshness import Freshness

    summary_ = summary(requests={"read": 1}, requests_by_key={"1a2b3c4d": 1})
    outcome = RunOutcome.from_summary(summary_, duration_s=1, finished_at=2)
    text = metrics.render(
        {}, outcome, {"synced": 1}, Freshness(1.0, 1.0), {"read": 1}, labels={"workspace": "w"}
    )
    used = {name for s in all_samples(text) for name in s.labels} - {"workspace"}
    assert used == METRIC_LABELS


def test_advance_in_memory_is_what_the_textfile_would_carry() -> None:
    previous = parse_samples(FILE_0_2_0.read_text())
    outcome = ok_outcome(requests_by_key={"1a2b3c4d": 4})
    through_text = parse_samples(metrics.render(previous, outcome, None))
    assert metrics.advance(previous, outcome) == through_text


@pytest.mark.integration
def test_a_run_s_start_does_not_import_prometheus_client() -> None:
    """Only writing or serving the exposition does: `sync` imports this module before it works."""
    import subprocess
    import sys

    code = (
        "import sys, skuferry.service.runner, skuferry.service.hooks; "
        "print('prometheus_client' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
