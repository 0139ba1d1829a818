"""``RemoteClient.from_settings``: how a run, ``check`` and the benchmarks build a client."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import respx

from skuferry import errors
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import Settings
from skuferry.remote.client import RemoteApi, RemoteClient

KEY = "sk-from-settings-4c2a"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return settings_from_dict(
        {
            "api": {"base_url": "https://cms.example.com/api/v1", "api_key": KEY},
            "source": {"type": "csv", "path": "c.csv"},
            "state": {"path": str(tmp_path / "s.db")},
        }
    )


def test_the_client_speaks_to_the_configured_api_with_the_key(settings: Settings) -> None:
    with respx.mock(assert_all_called=True) as router:
        route = router.get("https://cms.example.com/api/v1/products").mock(
            return_value=httpx.Response(200, json={"data": [], "meta": {"pages": 0}})
        )
        with RemoteClient.from_settings(settings, stop=None) as client:
            remote: RemoteApi = client  # the engine's view of it
            assert remote.probe() == 0
        assert route.calls.last.request.headers["Authorization"] == f"Bearer {KEY}"
    assert KEY not in repr(client)


def test_max_retries_can_be_overridden_for_check(settings: Settings) -> None:
    with respx.mock() as router:
        route = router.get("https://cms.example.com/api/v1/products").mock(
            return_value=httpx.Response(500, json={"error": {"code": "E", "message": "down"}})
        )
        client = RemoteClient.from_settings(settings, stop=None, max_retries=0)
        with client, pytest.raises(errors.ServerError):
            client.probe()
        assert route.call_count == 1  # [api] max_retries = 3 would have sent 4
