"""Fixtures every test may use (the integration ones are in tests/integration/conftest.py).

- ``clock``: a ``FakeClock`` (tests/fakes.py) that moves only when told; a module
  that needs another start defines its own ``clock`` fixture.
- ``write_toml``: a config file in ``tmp_path`` (or a given folder), private (0600)
  unless a test asks for another mode; ``tests.fakes.write_config_file`` outside fixtures.
- ``json_api``: a ``JsonApi`` (tests/json_api.py) on the loopback, closed after the test.

Markers (pyproject.toml): every test under tests/integration is ``integration`` (added
here if its file forgot); a unit test that starts a server or a process is marked in
its file. ``python3 dev.py test --fast`` runs the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog

from tests.fakes import FakeClock, write_config_file
from tests.json_api import JsonApi


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent.name == "integration" and item.path.parent.parent.name == "tests":
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    # A test that configures the logs (level, stream, JSON) must not decide what a later
    # test's captured events hold: the order of files is not a contract.
    config = structlog.get_config()
    yield
    structlog.configure(**config)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def write_toml(tmp_path: Path) -> Callable[..., Path]:
    def write(
        text: str, name: str = "skuferry.toml", *, folder: Path | None = None, mode: int = 0o600
    ) -> Path:
        return write_config_file(folder or tmp_path, text, name=name, mode=mode)

    return write


@pytest.fixture
def json_api() -> Iterator[JsonApi]:
    served = JsonApi()
    try:
        yield served
    finally:
        served.close()
