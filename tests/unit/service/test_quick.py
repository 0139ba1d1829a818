"""The quick lane's pure parts: which calls it takes, and when it does not even read the
config. What it reads is the loader's raw reading (test_config_raw.py); the lane as cron
runs it, and held against the full start: tests/integration/test_quick_lane.py,
test_quick_decision.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from skuferry.service import quick
from skuferry.service.quick import Call

ENV = {"SKUFERRY_CONFIG": "/etc/skuferry/skuferry.toml"}


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["sync", "-c", "a.toml"], Call("a.toml")),
        (["sync", "--config=a.toml", "--json"], Call("a.toml", as_json=True)),
        (["sync", "--quiet", "--config", "a.toml"], Call("a.toml", quiet=True)),
        (["-q"], None),
        (["sync"], Call("/etc/skuferry/skuferry.toml")),
        (
            ["-vv", "--log-format", "json", "sync", "-q"],
            Call(ENV["SKUFERRY_CONFIG"], quiet=True, verbose=2, log_format="json"),
        ),
        (
            ["-v", "--log-format=console", "sync"],
            Call(ENV["SKUFERRY_CONFIG"], verbose=1, log_format="console"),
        ),
        (["--log-format", "xml", "sync"], None),
        (["--debug", "sync"], None),  # a traceback is the full start's
        (["sync", "--full"], None),
        (["sync", "--verify"], None),
        (["sync", "--dry-run"], None),
        (["sync", "--only", "SKU-1"], None),
        (["sync", "SKU-1"], None),
        (["sync", "--force"], None),
        (["plan"], None),
        (["run"], None),
        (["status"], None),
        ([], None),
        (["--help"], None),
        (["sync", "--help"], None),
    ],
)
def test_only_a_plain_sync_is_taken(argv: list[str], expected: Call | None) -> None:
    assert quick.parse(argv, ENV) == expected


def test_no_config_is_the_full_start_s_to_word() -> None:
    assert quick.parse(["sync"], {}) is None
    assert quick.parse(["sync", "--config", ""], {}) is None
    assert quick.parse(["sync", "--config"], ENV) is None, (
        "click's usage error, not $SKUFERRY_CONFIG"
    )


def test_a_terminal_or_the_switch_is_the_full_start_s(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On a terminal (a progress bar to draw) or with SKUFERRY_QUICK=off, the lane does not
    even read the config."""
    read: list[str] = []
    monkeypatch.setattr(quick, "read", lambda call, env: read.append(call.config))
    argv = ["sync", "-c", str(tmp_path / "skuferry.toml")]
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    assert quick.attempt(argv, {}) is None
    monkeypatch.setattr("sys.stderr.isatty", lambda: False)
    for off in ("off", "0", "no", "false", "OFF"):
        assert quick.attempt(argv, {"SKUFERRY_QUICK": off}) is None
    assert read == []
    assert quick.attempt(argv, {}) is None
    assert read == [argv[-1]], "off a terminal, the lane looks"
