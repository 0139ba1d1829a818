"""Files with catalog data or secrets are owner-only even under a permissive umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from skuferry import files
from skuferry.models import Product
from skuferry.service import metrics
from skuferry.state import schema
from skuferry.state.lock import lock_path, run_lock
from skuferry.state.mirror import Mirror


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("permissive_umask")
def test_a_fresh_state_folder_is_0700_and_every_file_in_it_0600(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    state = tmp_path / "var" / "skuferry" / "skuferry.db"
    with run_lock(state):
        mirror = Mirror(state)
        try:
            mirror.record_created(Product(key="A", payload={"sku": "A"}, digest="d1", line=1), "r1")
            made = sorted(p.name for p in state.parent.iterdir())
            assert made == ["skuferry.db", "skuferry.db-shm", "skuferry.db-wal", "skuferry.db.lock"]
            assert {p.name: mode(p) for p in state.parent.iterdir()} == dict.fromkeys(made, 0o600)
        finally:
            mirror.close()
    assert mode(state.parent) == 0o700
    assert mode(state.parent.parent) == 0o700  # every folder skuferry had to create
    assert mode(tmp_path) == 0o755  # a folder that existed is left as it was


@pytest.mark.usefixtures("permissive_umask")
def test_the_lock_alone_creates_a_private_folder(tmp_path: Path) -> None:
    state = tmp_path / "new" / "skuferry.db"
    with run_lock(state):
        assert mode(lock_path(state)) == 0o600
    assert mode(state.parent) == 0o700


@pytest.mark.usefixtures("permissive_umask")
def test_the_metrics_temp_file_is_private_until_the_finished_file_replaces_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    real_replace = Path.replace

    def spy(self: Path, target: Path) -> Path:
        seen.append(mode(self))
        return real_replace(self, target)

    # the chmod 0644 happens right before the rename: watch the file as it is written
    real_fdopen = os.fdopen

    def fdopen_spy(fd: int, *args: object, **kwargs: object) -> object:
        seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return real_fdopen(fd, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(Path, "replace", spy)
    monkeypatch.setattr(os, "fdopen", fdopen_spy)
    metrics.write_atomically(tmp_path / "skuferry.prom", "x 1\n")
    assert seen[0] == 0o600  # while the content is being written
    assert seen[1] == 0o644  # counts only: node_exporter (another user) must read it


def test_an_existing_state_file_readable_by_others_gets_a_warning_with_the_chmod(
    tmp_path: Path,
) -> None:
    state = tmp_path / "skuferry.db"
    schema.open_state(state).close()
    state.chmod(0o644)
    with capture_logs() as logs:
        schema.open_state(state).close()
    warnings = [e for e in logs if e["event"] == "state.file.readable"]
    assert len(warnings) == 1
    assert f"chmod 600 {state}" in warnings[0]["message"]
    assert warnings[0]["path"] == str(state)
    assert mode(state) == 0o644  # reported, not changed behind the operator's back


def test_a_private_state_file_opens_without_a_warning(tmp_path: Path) -> None:
    state = tmp_path / "skuferry.db"
    schema.open_state(state).close()
    with capture_logs() as logs:
        schema.open_state(state).close()
    assert not [e for e in logs if e["event"] == "state.file.readable"]


@pytest.mark.usefixtures("permissive_umask")
def test_create_private_leaves_an_existing_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("keep", encoding="utf-8")
    path.chmod(0o640)
    assert files.create_private(path) is False
    assert mode(path) == 0o640
    assert path.read_text(encoding="utf-8") == "keep"
    new = tmp_path / "g"
    assert files.create_private(new) is True
    assert mode(new) == 0o600


def test_loose_mode_warning_names_the_file_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("", encoding="utf-8")
    path.chmod(0o600)
    assert files.loose_mode_warning(path, what="config file") is None
    path.chmod(0o640)
    message = files.loose_mode_warning(path, what="config file")
    assert message == (
        f"config file {path} is readable by other users (mode 0640); run: chmod 600 {path}"
    )
