"""The ``[daemon]`` secrets (hook secret, console token): each read from its own keys.

``<key>_env`` names a variable of the environment given; ``<key>_file`` a file; neither
set is None (the feature is off), and one secret's keys never stand in for the other's.
"""

from __future__ import annotations

from pathlib import Path

from skuferry.config.schema.settings import DaemonSettings
from skuferry.config.secrets import read_daemon_secret


def test_each_daemon_secret_is_read_from_its_own_variable() -> None:
    daemon = DaemonSettings(hook_secret_env="HOOK", console_token_env="CONSOLE")
    env = {"HOOK": "hook-secret-value", "CONSOLE": "console-token-value"}
    hook = read_daemon_secret(daemon, "hook_secret", env)
    console = read_daemon_secret(daemon, "console_token", env)
    assert hook is not None and hook.get_secret_value() == "hook-secret-value"
    assert console is not None and console.get_secret_value() == "console-token-value"


def test_a_daemon_secret_is_read_from_its_file(tmp_path: Path) -> None:
    secret = tmp_path / "hook"
    secret.write_text("from-the-file\n", encoding="utf-8")  # its line break is not the secret
    secret.chmod(0o600)
    daemon = DaemonSettings(hook_secret_file=secret)
    found = read_daemon_secret(daemon, "hook_secret", {})
    assert (
        found is not None and found.get_secret_value() == "from-the-file"
    )  # its line break is not the secret
    assert read_daemon_secret(daemon, "console_token", {}) is None


def test_no_daemon_secret_configured_is_none() -> None:
    daemon = DaemonSettings()
    assert read_daemon_secret(daemon, "hook_secret", {"HOOK": "x"}) is None
    assert read_daemon_secret(daemon, "console_token", {}) is None
