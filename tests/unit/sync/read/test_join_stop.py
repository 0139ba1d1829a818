"""A join source hears the engine's stop, as the primary source does (issue 19 §3).

respx stands in for the PIM API; it answers 503, so the retry loop waits: a
``stop.wait`` when the stop event reached the source (nothing really sleeps), a real
backoff of a fraction of a second when it did not (then the one retry is sent and the
test fails). The stop event here is set by whoever waits on it (a SIGTERM during the
wait): the read ends with ``Interrupted`` and the request is not sent again.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
import respx

from skuferry.config.load import settings_from_dict
from skuferry.config.schema import JoinSettings
from skuferry.errors import Interrupted
from skuferry.sync.engine import Adapters, run_once
from skuferry.sync.read.joins import open_joins
from skuferry.sync.read.pieces import open_pieces
from tests.fakes import FakeRemote

URL = "https://pim.example.com/api/items"
API = {"type": "http", "url": URL, "items_path": "items", "pagination": "none", "max_retries": 1}


class SignalledStop(threading.Event):
    """A stop event set while anyone waits on it: ``wait`` records and returns True."""

    def __init__(self) -> None:
        super().__init__()
        self.waited: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waited.append(timeout)
        self.set()
        return True


def _busy(mock: respx.MockRouter) -> respx.Route:
    return mock.get(URL).mock(return_value=httpx.Response(503, headers={"Retry-After": "0"}))


def test_a_join_source_ends_its_retry_wait_on_stop(tmp_path: Path) -> None:
    spec = JoinSettings.model_validate({"name": "pim", **API, "key": "sku", "on": "SKU"})
    stop = SignalledStop()
    with respx.mock(assert_all_mocked=True) as mock:
        route = _busy(mock)
        with pytest.raises(Interrupted):
            open_joins([spec], tmp_path, stop=stop)
    assert len(stop.waited) == 1 and route.call_count == 1, "stopped in the wait, not sent again"


def test_open_pieces_hands_stop_to_its_own_source_and_to_each_join(tmp_path: Path) -> None:
    settings = settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k-test"},
            "source": API,
            "mapping": {"key": "sku"},
            "state": {"path": "state.db"},
        },
        base_dir=tmp_path,
    )
    stop = SignalledStop()
    with respx.mock(assert_all_mocked=True) as mock, ExitStack() as stack:
        route = _busy(mock)
        source, _tables = open_pieces(settings, stack, stop=stop)  # the fallback source
        with pytest.raises(Interrupted):
            list(source.records())
    assert len(stop.waited) == 1 and route.call_count == 1

    join = JoinSettings.model_validate({"name": "pim", **API, "key": "sku", "on": "sku"})
    joined = settings.model_copy(update={"join": [join]})
    stop = SignalledStop()
    with respx.mock(assert_all_mocked=True) as mock, ExitStack() as stack:
        route = _busy(mock)
        with pytest.raises(Interrupted):
            open_pieces(joined, stack, stop=stop)
    assert len(stop.waited) == 1 and route.call_count == 1


def test_a_run_hands_its_stop_to_a_join_source(tmp_path: Path) -> None:
    (tmp_path / "products.jsonl").write_text('{"sku": "A", "name": "Drill"}\n', encoding="utf-8")
    settings = settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k-test"},
            "source": {"type": "jsonl", "path": "products.jsonl"},
            "join": [{"name": "pim", **API, "key": "sku", "on": "sku"}],
            "mapping": {"key": "sku"},
            "state": {"path": "state.db"},
        },
        base_dir=tmp_path,
    )
    stop = SignalledStop()
    remote = FakeRemote()
    with respx.mock(assert_all_mocked=True) as mock:
        route = _busy(mock)
        with pytest.raises(Interrupted):
            run_once(settings, stop=stop, adapters=Adapters(client=remote))
    assert len(stop.waited) == 1 and route.call_count == 1
    assert remote.products == {}, "nothing written"
