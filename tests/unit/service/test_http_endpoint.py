"""``[daemon] listen``: /metrics read by Prometheus' own parser; /healthz flips on a failed run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from skuferry.errors import AuthError, ConfigError, SourceError, StateError
from skuferry.models import RunSummary
from skuferry.service.daemon import Daemon
from skuferry.service.http_endpoint import Board, Endpoint
from skuferry.service.metrics import RunOutcome
from tests.fakes import wait_until
from tests.unit.service.test_daemon import (
    FakeJob,
    RecordingNotifier,
    make_settings,
    started,
)

pytestmark = pytest.mark.integration  # the daemon's HTTP endpoint on loopback

__all__ = ["started"]  # the daemon fixture, shared with test_daemon.py

SECRET = "sk-live-Qw7pL2zR9xK4"
Started = Callable[..., tuple[Daemon, Any, dict[str, int]]]


def samples(url: str) -> dict[tuple[str, str], float]:
    response = httpx.get(f"{url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (s.name, ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def test_metrics_are_the_textfile_s_names_and_count_the_daemon_s_runs(
    tmp_path: Path, started: Started
) -> None:
    textfile = tmp_path / "skuferry.prom"
    settings = make_settings(
        tmp_path, daemon={"listen": "127.0.0.1:0"}, metrics={"textfile": str(textfile)}
    )
    job = FakeJob(RunSummary(created=3, requests={"read": 2, "write": 3}))
    daemon, _, _ = started(settings, job)
    url = daemon.endpoint_url
    assert url is not None and url.startswith("http://127.0.0.1:")
    wait_until(lambda: len(job.calls) >= 3 and daemon.last_outcome is not None, "three runs")
    daemon.request_stop()
    wait_until(lambda: not daemon.run_in_flight, "the runs to end")
    # after the stop the endpoint is closed: read what the last run left
    exposed = daemon.board.metrics_text()
    from_http = {
        s.name for family in text_string_to_metric_families(exposed) for s in family.samples
    }
    from_file = {
        s.name
        for family in text_string_to_metric_families(textfile.read_text())
        for s in family.samples
    }
    # the textfile is the runs'; the daemon adds what it says of itself
    assert from_http == from_file | {"skuferry_config_reload_failed"}
    runs = [
        s
        for f in text_string_to_metric_families(exposed)
        for s in f.samples
        if s.name == "skuferry_runs_total" and s.labels["result"] == "success"
    ]
    assert runs[0].value == len(job.calls)


def test_metrics_over_http_parse_and_show_the_run(tmp_path: Path, started: Started) -> None:
    settings = make_settings(tmp_path, daemon={"listen": "127.0.0.1:0"})
    job = FakeJob(RunSummary(created=3, requests={"read": 2, "write": 3}))
    daemon, _, _ = started(settings, job, interval_s=3600)
    wait_until(lambda: daemon.last_outcome is not None, "the first run")
    found = samples(str(daemon.endpoint_url))
    assert found[("skuferry_runs_total", "result=success")] == 1
    assert found[("skuferry_requests_total", "tier=write")] == 3
    assert found[("skuferry_last_run_exit_code", "")] == 0
    assert found[("skuferry_budget_per_minute", "tier=write")] == 60
    assert httpx.get(f"{daemon.endpoint_url}/nothing").status_code == 404


def test_healthz_flips_on_a_failed_run_and_says_why_without_secrets(
    tmp_path: Path, started: Started
) -> None:

    failing = {"now": False}

    def step(**_kw: Any) -> RunSummary:
        if failing["now"]:
            raise SourceError(f"http://pim.example/?token={SECRET}: HTTP 500")
        return RunSummary()

    settings = make_settings(tmp_path, daemon={"listen": "127.0.0.1:0"})
    job = FakeJob(step)
    daemon, _, _ = started(settings, job)
    url = str(daemon.endpoint_url)
    wait_until(lambda: daemon.last_outcome is not None, "a first run")
    healthy = httpx.get(f"{url}/healthz")
    assert healthy.status_code == 200
    assert healthy.json()["status"] == "ok"

    failing["now"] = True
    wait_until(lambda: httpx.get(f"{url}/healthz").status_code == 503, "healthz to flip")
    body = httpx.get(f"{url}/healthz").json()
    assert body["status"] == "failing"
    assert body["problems"] == ["the last run failed (exit 3, SourceError)"]
    assert SECRET not in json.dumps(body)
    assert SECRET not in httpx.get(f"{url}/metrics").text

    live = httpx.get(f"{url}/livez")  # a failing run is no reason to restart the process
    assert (live.status_code, live.json()["status"]) == (200, "alive")

    failing["now"] = False
    wait_until(lambda: httpx.get(f"{url}/healthz").status_code == 200, "healthz to recover")


def test_healthz_names_a_refused_key_as_the_reason(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    board = Board(lambda: settings, lambda: None, wall_clock=lambda: 100.0)
    refused = AuthError(401, "UNAUTHORIZED", f"invalid API key {SECRET}")
    board.record(RunOutcome.from_error(refused, duration_s=0.1, finished_at=99.0))
    status, body = board.health()
    assert status == 503
    assert body["problems"][0] == "the last run failed (exit 3, AuthError)"
    assert "refused the API key (HTTP 401)" in body["problems"][1]
    assert SECRET not in json.dumps(body)


def test_healthz_is_503_when_the_schedule_is_dead(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    problem: dict[str, str | None] = {"why": None}
    board = Board(lambda: settings, lambda: problem["why"])
    board.record(RunOutcome.from_summary(RunSummary(), duration_s=1, finished_at=10))
    assert board.health()[0] == 200
    problem["why"] = "the scheduler is not running"
    status, body = board.health()
    assert (status, body["problems"]) == (503, ["the scheduler is not running"])


def test_livez_is_200_while_the_schedule_lives_whatever_the_runs_did(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    problem: dict[str, str | None] = {"why": None}
    board = Board(lambda: settings, lambda: problem["why"])
    refused = AuthError(401, "UNAUTHORIZED", "invalid API key")  # a revoked key
    board.record(RunOutcome.from_error(refused, duration_s=0.1, finished_at=99.0))
    assert board.health()[0] == 503
    assert board.liveness() == (200, {"status": "alive", "problems": []})
    problem["why"] = "the scheduler is not running"
    status, body = board.liveness()
    assert (status, body["problems"]) == (503, ["the scheduler is not running"])


def test_before_any_run_metrics_still_parse(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    endpoint = Endpoint("127.0.0.1:0", Board(lambda: settings, lambda: None)).start()
    try:
        found = samples(endpoint.url)
        assert found[("skuferry_runs_total", "result=success")] == 0
        assert ("skuferry_last_run_exit_code", "") not in found
        assert httpx.get(f"{endpoint.url}/healthz").json() == {"status": "ok", "problems": []}
    finally:
        endpoint.stop()


def test_a_port_in_use_is_a_config_error_naming_daemon_listen(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    first = Endpoint("127.0.0.1:0", Board(lambda: settings, lambda: None))
    taken = first.url.rpartition(":")[2]
    try:
        with pytest.raises(ConfigError, match=r"daemon\.listen"):
            Endpoint(f"127.0.0.1:{taken}", Board(lambda: settings, lambda: None))
    finally:
        first.stop()


@pytest.mark.parametrize("bad", ["9347", "localhost:", "127.0.0.1:http", "127.0.0.1:70000"])
def test_listen_must_be_host_and_port(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="host:port"):
        make_settings(tmp_path, daemon={"listen": bad})


def test_state_file_errors_and_freshness_are_counted(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    board = Board(lambda: settings, lambda: None)
    board.record(RunOutcome.from_error(StateError("disk full"), duration_s=1, finished_at=10))
    board.record(RunOutcome.from_summary(RunSummary(), duration_s=1, finished_at=20))
    found = {
        s.name: s.value
        for family in text_string_to_metric_families(board.metrics_text())
        for s in family.samples
        if not s.labels
    }
    assert found["skuferry_state_errors_total"] == 1
    assert found["skuferry_last_success_timestamp_seconds"] == 20


def test_constant_labels_are_on_every_sample_of_metrics_too(
    tmp_path: Path, started: Started
) -> None:
    textfile = tmp_path / "skuferry.prom"
    settings = make_settings(
        tmp_path,
        daemon={"listen": "127.0.0.1:0"},
        metrics={"textfile": str(textfile), "labels": {"workspace": "acme"}},
    )
    daemon, _, _ = started(settings, FakeJob(RunSummary(created=1)), interval_s=3600)
    wait_until(lambda: daemon.last_outcome is not None, "the first run")
    found = samples(str(daemon.endpoint_url))
    assert found
    assert all("workspace=acme" in labels.split(",") for _, labels in found)
    assert found[("skuferry_runs_total", "result=success,workspace=acme")] == 1
    from_file = {
        (s.name, ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())))
        for family in text_string_to_metric_families(textfile.read_text())
        for s in family.samples
    }
    assert from_file <= set(found)  # the same samples, the same labels


@pytest.mark.parametrize(
    "change",
    [{"listen": "127.0.0.1:1"}, {"http_read_timeout_s": 3}, {"http_max_connections": 64}],
)
def test_a_reload_keeps_the_http_side_and_says_a_change_needs_a_restart(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    first = {"listen": "127.0.0.1:0"}
    configs = [
        make_settings(tmp_path, schedule={"run_at_start": False}, daemon=first),
        make_settings(tmp_path, schedule={"run_at_start": False}, daemon=first),
        make_settings(tmp_path, schedule={"run_at_start": False}, daemon=first | change),
    ]
    daemon = Daemon(
        None, job=FakeJob(), load=lambda _p: configs.pop(0), notifier=RecordingNotifier()
    )
    daemon.start()
    try:
        url = daemon.endpoint_url
        with capture_logs() as same:
            assert daemon.reload()
        assert not [e for e in same if e["event"] == "daemon.reload.listen_kept"]
        with capture_logs() as changed:
            assert daemon.reload()
        (kept,) = [e for e in changed if e["event"] == "daemon.reload.listen_kept"]
        assert "http_* limit" in kept["hint"]
        assert daemon.endpoint_url == url
        assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200
    finally:
        daemon.shutdown()
