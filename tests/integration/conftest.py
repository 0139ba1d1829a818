"""Fixtures for running skuferry against the real sandbox over loopback HTTP.

- ``sandbox_factory``: start a ``Sandbox`` with the given config; stopped at teardown.
- ``write_catalog`` / ``write_config``: a CSV catalog and a TOML config in ``tmp_path``.
- ``run_cli`` / ``start_cli`` (both as ``cli``): ``python -m skuferry ...`` as a user runs
  it, with a clean environment (no ``SKUFERRY_*`` leaking in from the developer's shell).
- ``assert_each_once``: the sandbox's own view — every expected key exactly once, nothing else.
- ``figures``: lines for the reliability summary printed at the end of the session, so the
  measured figures (fault rates, runs to converge, duplicates) can be quoted.
"""

from __future__ import annotations

import csv
import os
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from skuferry.sandbox import Sandbox, SandboxConfig
from tests.fakes import write_config_file

KEY = "sk-test-Zq8uV3kR7pL2"  # distinctive, so a leak into any output is found
WORKSPACE = "default"
FAST = 6000  # per minute: limits raised so only the tests that want a budget meet one
# The budget's allowance for the time between our clock and the server's count, where a
# test asserts zero 429s in real time: the default 0.5 s is meant for a quiet network, and
# a loaded 2-core CI box can hold a request back longer than that before it is sent.
LOADED_SKEW_S = 5.0

_FIGURES: list[str] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _FIGURES:
        terminalreporter.section("skuferry reliability figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)


@pytest.fixture
def figures() -> Callable[[str], None]:
    """Record one line for the session's reliability summary (also printed for ``-s``)."""

    def note(line: str) -> None:
        _FIGURES.append(line)
        print(line)  # visible with -s next to the test's own output

    return note


@pytest.fixture
def sandbox_factory() -> Iterator[Callable[..., Sandbox]]:
    started: list[Sandbox] = []

    def make(**config: Any) -> Sandbox:
        config.setdefault("keys", {KEY: WORKSPACE})
        config.setdefault("key_limits", {"read": FAST, "write": FAST})
        config.setdefault("workspace_limits", {"read": FAST, "write": FAST})
        sandbox = Sandbox(SandboxConfig(**config))
        sandbox.start()
        started.append(sandbox)
        return sandbox

    yield make
    for sandbox in started:
        sandbox.stop()


@pytest.fixture
def sandbox(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    """A sandbox with raised limits and PATCH on."""
    return sandbox_factory(updates="patch")


def catalog_rows(n: int, *, version: int = 0) -> list[dict[str, str]]:
    """``n`` realistic rows; ``version`` changes every price (for update runs)."""
    return [
        {
            "SKU": f"SKU-{i:05d}",
            "Name": f"Cordless drill {i}",
            "Price": f"{19 + i % 80}.{(i * 7 + version) % 100:02d}",
            "Stock": str((i * 13) % 500),
        }
        for i in range(1, n + 1)
    ]


def catalog_keys(n: int) -> list[str]:
    return [row["SKU"] for row in catalog_rows(n)]


@pytest.fixture
def write_catalog(tmp_path: Path) -> Callable[..., Path]:
    def write(
        rows: Sequence[Mapping[str, str]], name: str = "catalog.csv", *, extra: str = ""
    ) -> Path:
        path = tmp_path / name
        with path.open("w", newline="", encoding="utf-8") as f:
            out = csv.DictWriter(f, fieldnames=["SKU", "Name", "Price", "Stock"])
            out.writeheader()
            out.writerows(rows)
            f.write(extra)
        return path

    return write


CONFIG = """\
[api]
base_url = "{url}"
{key_line}
timeout_s = {timeout_s}
update_method = "patch"
max_in_flight = {max_in_flight}
max_retries = {max_retries}

[source]
type = "csv"
path = "{catalog}"

[mapping]
key = "sku"
[mapping.fields]
sku = "SKU"
name = "Name"
price = {{ column = "Price", type = "decimal" }}
stock = {{ column = "Stock", type = "integer" }}

[budget]
read_per_minute = {reads}
write_per_minute = {writes}
limiter = "{limiter}"
clock_skew_s = {clock_skew_s}

[state]
path = "state/skuferry.db"
{extra}
"""


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    def write(
        url: str,
        *,
        key: str | None = KEY,
        catalog: str = "catalog.csv",
        name: str = "skuferry.toml",
        timeout_s: float = 5.0,
        max_in_flight: int = 4,
        max_retries: int = 3,
        reads: int = FAST,
        writes: int = FAST,
        limiter: str = "window",
        clock_skew_s: float = 0.5,
        extra: str = "",
    ) -> Path:
        key_line = f'api_key = "{key}"' if key is not None else ""
        # 0600: it may hold the key inline; readable by others it gets a warning
        return write_config_file(
            tmp_path,
            CONFIG.format(
                url=url,
                key_line=key_line,
                timeout_s=timeout_s,
                max_in_flight=max_in_flight,
                max_retries=max_retries,
                catalog=catalog,
                reads=reads,
                writes=writes,
                limiter=limiter,
                clock_skew_s=clock_skew_s,
                extra=extra,
            ),
            name=name,
        )

    return write


def clean_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKUFERRY_")}
    env.pop("CREDENTIALS_DIRECTORY", None)
    env.pop("STATE_DIRECTORY", None)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(overrides)
    return env


@pytest.fixture
def run_cli(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``python -m skuferry ARGS`` in ``tmp_path``; never raises on a non-zero exit."""

    def run(
        *args: str, env: Mapping[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "skuferry", *args],
            cwd=tmp_path,
            env=clean_env(**(env or {})),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run


@pytest.fixture
def start_cli(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``python -m skuferry ARGS`` without waiting; killed and reaped at teardown."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "skuferry", *args],
            cwd=tmp_path,
            env=clean_env(**(env or {})),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


@dataclass(frozen=True)
class Cli:
    """``run`` to completion or ``start`` in the background: ``python -m skuferry ARGS``."""

    run: Callable[..., subprocess.CompletedProcess[str]]
    start: Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def cli(
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
    start_cli: Callable[..., subprocess.Popen[bytes]],
) -> Cli:
    return Cli(run=run_cli, start=start_cli)


def closed_port_url() -> str:
    """A loopback URL nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def remote_counts(sandbox: Sandbox, workspace: str = WORKSPACE) -> Counter[str]:
    return Counter(str(p.get("sku")) for p in sandbox.products(workspace))


def assert_each_once(sandbox: Sandbox, keys: Sequence[str], workspace: str = WORKSPACE) -> None:
    """The sandbox holds every key exactly once and nothing else (its own counts)."""
    counts = remote_counts(sandbox, workspace)
    duplicated = {k: n for k, n in counts.items() if n > 1}
    missing = sorted(set(keys) - set(counts))
    extra = sorted(set(counts) - set(keys))
    assert not duplicated, f"duplicates on the remote: {duplicated}"
    assert not missing, f"{len(missing)} product(s) missing on the remote: {missing[:10]}"
    assert not extra, f"unexpected products on the remote: {extra[:10]}"
    assert sandbox.stats().duplicates.get(workspace, {}) == {}
    assert sandbox.stats().products.get(workspace, 0) == len(keys)
