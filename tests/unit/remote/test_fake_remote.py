"""The in-memory fake remote passes the remote contract (so the engine's tests mean something)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from skuferry.remote.client import RemoteApi
from tests.fakes import FakeRemote
from tests.remote_contract import MakeRemote, RemoteContract, Updates


class TestFakeRemote(RemoteContract):
    @pytest.fixture
    def make(self) -> Iterator[MakeRemote]:
        def make(
            *, updates: Updates | None = "both", allowed: dict[str, int] | None = None
        ) -> RemoteApi:
            return FakeRemote(updates=updates or "none", allowed=dict(allowed or {}))

        yield make
