"""A failed reload, where to look: the file, the line, the key; and the daemon that reports
it (``/healthz`` 200 with a ``degraded`` entry, the metric, liveness untouched) until a
good reload clears it."""

from __future__ import annotations

from pathlib import Path

import pytest

from skuferry.config.load import load_settings
from skuferry.errors import ConfigError, LockHeld, StateError
from skuferry.service.daemon import Daemon
from skuferry.service.degraded import key_line, of_failure
from skuferry.service.metrics import parse_samples
from skuferry.service.notify import Notifier
from tests.unit.service.test_daemon import FakeJob, make_settings

TOML = """\
[api]
base_url = "http://127.0.0.1:9"
api_key = "k"

[budget]
read_per_minute = 300
write_per_minute = 0

[mapping.fields]
sku = "SKU"
price = { column = "Price", type = "decimal" }

[[join]]
name = "pim"

[[join]]
name = "stock"
key = "Sku"
"""


@pytest.mark.parametrize(
    ("key", "line"),
    [
        ("budget.write_per_minute", 7),
        ("budget", 5),
        ("budget.urgent_share", 5),  # not in the file: its table's line
        ("mapping.fields.price.type", 11),
        ("join.1.key", 18),
        ("join.0.key", 13),
        ("schedule.cron", None),
    ],
)
def test_a_key_s_line_is_found_under_its_table(tmp_path: Path, key: str, line: int | None) -> None:
    path = tmp_path / "acme.toml"
    path.write_text(TOML)
    assert key_line(path, key) == line


def test_a_toml_error_names_its_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "acme.toml"
    path.write_text('[api]\nbase_url = "http://x\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env={})
    found = of_failure(path, caught.value, 1.0)
    assert (found.file, found.line, found.key) == (str(path), 2, None)
    assert found.where() == f"{path} line 2"
    assert found.as_json()["line"] == 2
    assert "problems" not in found.as_json(), "/healthz shows where, never the message"


def test_a_bad_value_names_its_key_and_the_key_s_line(tmp_path: Path) -> None:
    path = tmp_path / "acme.toml"
    catalog = tmp_path / "p.csv"
    path.write_text(
        '[api]\nbase_url = "http://127.0.0.1:9"\napi_key = "k"\n'
        f'[source]\ntype = "csv"\npath = "{catalog}"\n'
        "[budget]\nwrite_per_minute = 0\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env={})
    found = of_failure(path, caught.value, 1.0)
    assert (found.file, found.line, found.key) == (str(path), 8, "budget.write_per_minute")
    assert found.problems == tuple(caught.value.problems)


def test_a_value_from_the_environment_names_the_variable() -> None:
    problem = "$SKUFERRY_BUDGET__WRITE_PER_MINUTE: at 'budget.write_per_minute': must be > 0"
    found = of_failure(Path("/etc/acme.toml"), ConfigError([problem]), 1.0)
    assert (found.file, found.line) == ("$SKUFERRY_BUDGET__WRITE_PER_MINUTE", None)


def test_another_failure_names_the_config_file() -> None:
    found = of_failure(Path("/etc/acme.toml"), LockHeld("the new state is held"), 1.0)
    assert (found.file, found.line, found.problems) == (
        "/etc/acme.toml",
        None,
        ("the new state is held",),
    )


def test_a_failed_reload_degrades_health_but_not_liveness_until_a_good_one(
    tmp_path: Path,
) -> None:
    good = make_settings(tmp_path, schedule={"interval_minutes": 600, "run_at_start": False})
    broken = ConfigError([f"{tmp_path / 'acme.toml'}: line 3: unterminated string"])
    also_broken = StateError("cannot open the new state file")
    loads: list[object] = [good, broken, also_broken, good]

    def load(_path: Path | None) -> object:
        found = loads.pop(0)
        if isinstance(found, Exception):
            raise found
        return found

    daemon = Daemon(None, job=FakeJob(), load=load, notifier=Notifier(None))  # type: ignore[arg-type]
    daemon.start()
    try:
        assert not daemon.reload()
        status, body = daemon.board.health()
        assert (status, body["status"]) == (200, "degraded")
        (entry,) = body["degraded"]
        assert (entry["file"], entry["line"]) == (str(tmp_path / "acme.toml"), 3)
        assert daemon.board.liveness()[0] == 200
        exposed = parse_samples(daemon.board.metrics_text())
        assert exposed[("skuferry_config_reload_failed", None)] == 1.0
        assert not daemon.reload()
        assert daemon.board.health()[1]["degraded"][0]["line"] is None, "the last failure"
        assert daemon.reload()
        status, body = daemon.board.health()
        assert (status, body["status"], "degraded" in body) == (200, "ok", False)
        exposed = parse_samples(daemon.board.metrics_text())
        assert exposed[("skuferry_config_reload_failed", None)] == 0.0
    finally:
        daemon.shutdown()
