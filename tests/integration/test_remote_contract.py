"""``RemoteClient`` against the sandbox passes the remote contract, over loopback HTTP."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from pydantic import SecretStr

from skuferry.remote.client import RemoteApi, RemoteClient
from skuferry.sandbox import Sandbox
from tests.integration.conftest import FAST, KEY
from tests.remote_contract import MakeRemote, RemoteContract, Updates


class TestRemoteClientOnTheSandbox(RemoteContract):
    @pytest.fixture
    def make(self, sandbox_factory: Callable[..., Sandbox]) -> Iterator[MakeRemote]:
        clients: list[RemoteClient] = []

        def make(
            *, updates: Updates | None = "both", allowed: dict[str, int] | None = None
        ) -> RemoteApi:
            limits = {"read": FAST, "write": FAST, **(allowed or {})}
            sandbox = sandbox_factory(updates=updates, key_limits=limits)
            # No retries: a 429 reaches the caller as the contract's shape, not a wait.
            client = RemoteClient(
                base_url=sandbox.url, api_key=SecretStr(KEY), timeout_s=5.0, max_retries=0
            )
            clients.append(client)
            return client

        yield make
        for client in clients:
            client.close()
