"""The quick lane's pure parts (service/quick.py): which calls it takes, where it looks for
the state file, and what its digest sees. The lane as cron runs it: tests/integration/
test_quick_lane.py."""

from __future__ import annotations

import tomllib
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


def test_the_state_file_is_looked_for_where_the_loader_puts_it(tmp_path: Path) -> None:
    config = tmp_path / "etc" / "skuferry.toml"
    assert quick._state_path(config, {}, {}) == config.parent / "skuferry.db"
    assert quick._state_path(config, {}, {"STATE_DIRECTORY": "/var/lib/a:/x"}) == Path(
        "/var/lib/a/skuferry.db"
    )
    data = {"state": {"path": "state/s.db"}}
    assert quick._state_path(config, data, {}) == config.parent / "state" / "s.db"
    assert quick._state_path(config, {"state": {"path": "/srv/s.db"}}, {}) == Path("/srv/s.db")
    env = {"SKUFERRY_STATE_PATH": "/run/s.db"}
    assert quick._state_path(config, data, env) == Path("/run/s.db")
    # not sure: the full start decides
    assert quick._state_path(config, {"state": {"path": "$DIR/s.db"}}, {}) is None
    assert quick._state_path(config, data, {"SKUFERRY_STATE__PATH": "/x.db"}) is None


CONFIG = """
[api]
base_url = "http://127.0.0.1:9"
api_key = "sk-secret-1"

[source]
type = "csv"
path = "${EXPORT}/catalog.csv"
password = "not-used"

[mapping]
key = "sku"
[mapping.fields]
sku = "SKU"
"""


def _digest(path: Path, text: str, env: dict[str, str], watched: list[str] | None = None) -> str:
    path.write_text(text, encoding="utf-8")
    return quick.digest(path, tomllib.loads(text), text, env, watched or [])


def test_the_digest_sees_every_input_but_secret_values(tmp_path: Path) -> None:
    config = tmp_path / "skuferry.toml"
    env = {"EXPORT": "/srv/a", "SKUFERRY_API_KEY": "sk-env-1", "PATH": "/bin"}
    base = _digest(config, CONFIG, env)
    assert _digest(config, CONFIG, env) == base, "deterministic"
    # secrets count as set, not by value: a rotated key is no change (as the engine masks it)
    assert _digest(config, CONFIG.replace("sk-secret-1", "sk-secret-2"), env) == base
    assert _digest(config, CONFIG.replace("not-used", "other"), env) == base
    assert _digest(config, CONFIG, {**env, "SKUFERRY_API_KEY": "sk-env-2"}) == base
    assert _digest(config, CONFIG, {**env, "PATH": "/usr/bin"}) == base, "not named by it"
    # everything else is
    changed = [
        _digest(config, CONFIG.replace('key = "sku"', 'key = "ean"'), env),
        _digest(config, CONFIG.replace('api_key = "sk-secret-1"', 'api_key = ""'), env),
        _digest(config, CONFIG, {**env, "EXPORT": "/srv/b"}),
        _digest(config, CONFIG, {**env, "SKUFERRY_SAFETY__MAX_CHANGE_RATIO": "0.9"}),
        _digest(config, CONFIG, {**env, "STATE_DIRECTORY": "/var/lib/x"}),
        _digest(config, CONFIG, env, watched=[str(tmp_path / "missing.key")]),
        _digest(tmp_path / "other.toml", CONFIG, env),
    ]
    config.chmod(0o600)
    changed.append(quick.digest(config, tomllib.loads(CONFIG), CONFIG, env, []))
    assert base not in changed and len(set(changed)) == len(changed)


def test_a_key_file_written_anew_is_no_change(tmp_path: Path) -> None:
    """systemd's LoadCredential= and a pod's Secret volume write the key again for every
    run: a new inode and new times, the same key. Gone, unreadable or resized, it counts."""
    config, key = tmp_path / "skuferry.toml", tmp_path / "api_key"
    key.write_text("sk-1\n", encoding="utf-8")
    base = _digest(config, CONFIG, {}, watched=[str(key)])
    key.unlink()
    key.write_text("sk-2\n", encoding="utf-8")  # another inode, other times, same size
    assert _digest(config, CONFIG, {}, watched=[str(key)]) == base
    key.write_text("sk-22\n", encoding="utf-8")
    assert _digest(config, CONFIG, {}, watched=[str(key)]) != base
    key.unlink()
    assert _digest(config, CONFIG, {}, watched=[str(key)]) != base


def test_a_terminal_or_the_switch_is_the_full_start_s(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On a terminal (a progress bar to draw) or with SKUFERRY_QUICK=off, the lane does not
    even read the config."""
    read: list[str] = []
    monkeypatch.setattr(quick, "_read_config", lambda call, env: read.append(call.config))
    argv = ["sync", "-c", str(tmp_path / "skuferry.toml")]
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    assert quick.attempt(argv, {}) is None
    monkeypatch.setattr("sys.stderr.isatty", lambda: False)
    for off in ("off", "0", "no", "false", "OFF"):
        assert quick.attempt(argv, {"SKUFERRY_QUICK": off}) is None
    assert read == []
    assert quick.attempt(argv, {}) is None
    assert read == [argv[-1]], "off a terminal, the lane looks"
