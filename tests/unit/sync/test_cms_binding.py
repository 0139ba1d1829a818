"""The state file knows the CMS it mirrors (issue 37, item 9; ``state.binding``,
``sync.write.workspace``), and a field accepted as gone is left alone (item 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from skuferry import errors
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import MappingSettings, Settings
from skuferry.models import BadRecord, Product, RawRecord, RunOptions, RunSummary
from skuferry.state import binding
from skuferry.state.binding import Binding
from skuferry.state.mirror import Mirror
from skuferry.sync.engine import Adapters, run_once
from skuferry.sync.map.mapper import Mapper
from tests.fakes import FakeRemote, ListSource

ROWS = [{"sku": f"A-{i}", "name": f"Article {i}"} for i in range(5)]


def _settings(tmp_path: Path, *, url: str = "http://127.0.0.1:9", key: str = "k-a") -> Settings:
    return settings_from_dict(
        {
            # the in-memory list shows every write at once: a 404'd id is looked up at once
            "api": {"base_url": url, "api_key": key, "list_lag_s": 0},
            "source": {"type": "csv", "path": str(tmp_path / "x.csv")},
            "mapping": {"key": "sku"},
            "state": {"path": str(tmp_path / "state.db")},
        }
    )


def _sync(settings: Settings, remote: FakeRemote, **flags: Any) -> RunSummary:
    adapters = Adapters(source=ListSource(ROWS), client=remote)
    return run_once(settings, RunOptions(**flags), adapters=adapters)


def _bound(settings: Settings) -> Binding | None:
    mirror = Mirror(settings.state.path)
    try:
        return binding.recorded(mirror)
    finally:
        mirror.close()


def test_a_run_binds_its_state_and_another_workspace_is_refused(tmp_path: Path) -> None:
    shop_a, shop_b = FakeRemote(), FakeRemote()
    first = _settings(tmp_path)
    assert _sync(first, shop_a).created == 5
    assert _bound(first) == Binding.of("http://127.0.0.1:9/", ["k-a"])
    other = _settings(tmp_path, key="k-b")  # one [state] path, another workspace's key
    with pytest.raises(errors.CmsMismatch, match=r"state file .*state\.db mirrors http"):
        _sync(other, shop_b)
    assert shop_b.products == {} and shop_b.requests["write"] == 0
    assert shop_b.requests["read"] == 3, "three products looked up by id, then refused"
    assert _sync(first, shop_a).unchanged == 5, "the state's own CMS runs on"


def test_a_rotated_key_of_the_same_workspace_is_learnt(tmp_path: Path) -> None:
    shop = FakeRemote()
    _sync(_settings(tmp_path), shop)
    rotated = _settings(tmp_path, key="k-rotated")
    summary = _sync(rotated, shop)
    assert (summary.unchanged, shop.requests["write"]) == (5, 5)
    assert any("found there by id" in note for note in summary.notes)
    assert _bound(rotated) == Binding.of("http://127.0.0.1:9", ["k-rotated"])


def test_a_moved_workspace_is_bound_and_walked(tmp_path: Path) -> None:
    _sync(_settings(tmp_path), FakeRemote())
    moved = FakeRemote()
    moved.seed(*ROWS[:2])  # imported there under new ids; the rest not yet
    there = _settings(tmp_path, url="http://127.0.0.2:9")
    with pytest.raises(errors.CmsMismatch):
        _sync(there, moved)
    summary = _sync(there, moved, moved_cms=True, verify=True)
    assert summary.exit_code == 0
    assert sorted(moved.keys()) == sorted(r["sku"] for r in ROWS), "each once"
    assert _bound(there) == Binding.of("http://127.0.0.2:9", ["k-a"])


def test_the_rule_compares_url_and_keys() -> None:
    bound = Binding.of("https://CMS.example.com/", ["k1", "k2"])
    assert binding.compare(None, bound) is None
    assert binding.compare(bound, Binding.of("https://cms.example.com", ["k2", "k3"])) is None
    assert "none of the keys" in str(binding.compare(bound, Binding.of(bound.base_url, ["k9"])))
    other = Binding.of("https://cms2.example.com", ["k1"])
    assert "another base URL" in str(binding.compare(bound, other))
    reading = {"api": {"base_url": "https://cms.example.com", "api_key": "k1"}}
    assert Binding.of_reading(reading) == Binding.of("https://cms.example.com", ["k1"])


# --- a field accepted as gone ----------------------------------------------------------------


def _mapper(gone: set[str]) -> Mapper:
    mapping = MappingSettings.model_validate(
        {
            "key": "sku",
            "fields": {
                "sku": "SKU",
                "text": {"column": "Text", "default": "(no text)", "required": True},
                "price": {"column": "Price", "type": "decimal"},
            },
        }
    )
    return Mapper(mapping, gone=gone)


@pytest.mark.parametrize("gone", [set(), {"text"}])
def test_a_field_gone_is_left_out_never_defaulted(gone: set[str]) -> None:
    mapper = _mapper(gone)
    without = mapper.map(RawRecord(2, {"SKU": "A", "Price": "1.50"}))
    assert isinstance(without, Product)
    if gone:
        assert "text" not in without.payload, "left alone on the CMS, not '(no text)'"
    else:
        assert without.payload["text"] == "(no text)"
    empty = mapper.map(RawRecord(3, {"SKU": "B", "Text": "", "Price": "1"}))
    assert not isinstance(empty, BadRecord)
    back = mapper.map(RawRecord(4, {"SKU": "C", "Text": "Oak", "Price": "2"}))
    assert isinstance(back, Product) and back.payload["text"] == "Oak", "given again: sent"
    assert (mapper.seed == _mapper(set()).seed) is not bool(gone), "the gone fields count"
