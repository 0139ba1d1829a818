"""The units in systemd/: they verify, score well on `systemd-analyze security`, keep promises.

``systemd-analyze verify`` refuses a unit whose ExecStart binary does not exist, and
only warns (exit 0) on unknown keys; so each unit is checked as a copy whose
ExecStart points at a stand-in executable, and any output at all fails the test.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from skuferry.service.http_server import FD_RESERVE, Limits

UNITS_DIR = Path(__file__).resolve().parents[2] / "systemd"
UNITS = sorted(p.name for p in UNITS_DIR.iterdir() if p.suffix in (".service", ".timer", ".path"))
SERVICES = [u for u in UNITS if u.endswith(".service")]
BINARY = "/usr/local/bin/skuferry"
MAX_EXPOSURE = 2.0

ANALYZE = shutil.which("systemd-analyze") or (
    "/usr/bin/systemd-analyze" if Path("/usr/bin/systemd-analyze").exists() else None
)
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")


def directives(unit: str) -> list[tuple[str, str, str]]:
    """(section, key, value) for every line, duplicates kept, as systemd reads them."""
    out, section = [], ""
    for raw in (UNITS_DIR / unit).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.append((section, key.strip(), value.strip()))
    return out


def values(unit: str, key: str) -> list[str]:
    return [v for _s, k, v in directives(unit) if k == key]


@pytest.fixture
def staged(tmp_path: Path) -> Path:
    """All units in a temp dir (so timers find their services), ExecStart on a real file."""
    fake = tmp_path / "bin" / "skuferry"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    units = tmp_path / "units"
    units.mkdir()
    for name in UNITS:
        text = (UNITS_DIR / name).read_text()
        assert BINARY in text or name.endswith((".timer", ".path"))
        (units / name).write_text(text.replace(BINARY, str(fake)))
    return units


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None
    return subprocess.run([ANALYZE, *args], capture_output=True, text=True, timeout=60, check=False)


def test_every_expected_unit_exists() -> None:
    assert set(UNITS) == {
        "skuferry.service",
        "skuferry-sync.service",
        "skuferry-sync.timer",
        "skuferry@.service",
        "skuferry-sync@.service",
        "skuferry-sync@.timer",
        "skuferry-sync.path",
    }


@pytest.mark.integration
@needs_analyze
@pytest.mark.systemd
@pytest.mark.parametrize("unit", UNITS)
def test_unit_verifies_without_a_warning(staged: Path, unit: str) -> None:
    result = analyze("verify", "--man=no", str(staged / unit))
    assert result.returncode == 0, result.stderr
    assert result.stdout + result.stderr == ""  # unknown keys are only warnings


@needs_analyze
@pytest.mark.systemd
@pytest.mark.parametrize(
    ("unit", "templates"),
    [
        ("skuferry@shop-eu.service", ["skuferry@.service"]),
        ("skuferry-sync@shop-eu.timer", ["skuferry-sync@.timer", "skuferry-sync@.service"]),
    ],
)
@pytest.mark.integration
def test_template_instances_verify(staged: Path, unit: str, templates: list[str]) -> None:
    for template in templates:
        shutil.copy(staged / template, staged / template.replace("@.", "@shop-eu."))
    result = analyze("verify", "--man=no", str(staged / unit))
    assert result.returncode == 0, result.stderr
    assert result.stdout + result.stderr == ""


@pytest.mark.integration
@needs_analyze
@pytest.mark.systemd
@pytest.mark.parametrize("unit", SERVICES)
def test_security_exposure_is_low(staged: Path, unit: str) -> None:
    result = analyze("security", "--offline=true", "--no-pager", str(staged / unit))
    assert result.returncode == 0, result.stderr
    match = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", result.stdout)
    assert match, result.stdout[-500:]
    assert float(match.group(1)) <= MAX_EXPOSURE, result.stdout


def test_daemon_units_are_notify_services_with_a_watchdog() -> None:
    for unit in ("skuferry.service", "skuferry@.service"):
        assert values(unit, "Type") == ["notify"]
        assert values(unit, "NotifyAccess") == ["main"]
        assert values(unit, "WatchdogSec")
        assert values(unit, "Restart") == ["on-failure"]
        assert values(unit, "ExecStart") == [f"{BINARY} run"]
        assert values(unit, "ExecReload") == ["/bin/kill -HUP $MAINPID"]


def test_daemon_units_leave_descriptors_for_the_http_side_s_connection_cap() -> None:
    needed = Limits().max_connections + FD_RESERVE  # what the default cap holds, and the rest
    for unit in ("skuferry.service", "skuferry@.service"):
        (limit,) = values(unit, "LimitNOFILE")
        assert int(limit) >= needed, unit


def test_sync_units_are_oneshots_where_a_held_lock_is_success() -> None:
    for unit in ("skuferry-sync.service", "skuferry-sync@.service"):
        assert values(unit, "Type") == ["oneshot"]
        assert values(unit, "ExecStart") == [f"{BINARY} sync --quiet"]
        assert values(unit, "SuccessExitStatus") == ["75"]


def test_the_path_unit_starts_the_oneshot_when_the_export_changes() -> None:
    assert values("skuferry-sync.path", "PathChanged") == ["/var/lib/skuferry/export/products.csv"]
    assert values("skuferry-sync.path", "Unit") == ["skuferry-sync.service"]
    assert values("skuferry-sync.path", "WantedBy") == ["paths.target"]


def test_timers_catch_up_and_spread() -> None:
    for unit in ("skuferry-sync.timer", "skuferry-sync@.timer"):
        assert values(unit, "OnCalendar") == ["*:0/15"]
        assert values(unit, "Persistent") == ["true"]
        assert values(unit, "RandomizedDelaySec")


@pytest.mark.parametrize("unit", SERVICES)
def test_services_are_sandboxed_and_get_the_key_as_a_credential(unit: str) -> None:
    templated = "@" in unit
    name = "%i" if templated else None
    assert values(unit, "DynamicUser") == ["yes"]
    assert values(unit, "StateDirectory") == ["skuferry/%i" if templated else "skuferry"]
    assert values(unit, "ConfigurationDirectory") == ["skuferry"]
    assert values(unit, "LoadCredential") == [
        f"api_key:/etc/skuferry/{name}.key" if name else "api_key:/etc/skuferry/api_key"
    ]
    assert values(unit, "Environment") == [
        f"SKUFERRY_CONFIG=/etc/skuferry/{name}.toml"
        if name
        else "SKUFERRY_CONFIG=/etc/skuferry/config.toml",
        f"SKUFERRY_STATE_PATH=%S/skuferry/{name}/skuferry.db"
        if name
        else "SKUFERRY_STATE_PATH=%S/skuferry/skuferry.db",
    ]
    for key, expected in [
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("NoNewPrivileges", "yes"),
        ("CapabilityBoundingSet", ""),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
        ("MemoryDenyWriteExecute", "yes"),
        ("LockPersonality", "yes"),
        ("UMask", "0077"),
    ]:
        assert values(unit, key) == [expected], key
    assert values(unit, "SystemCallFilter") == ["@system-service", "~@privileged @resources"]
