"""The upgrade: a state file the previous release wrote runs on, with 0 duplicates, and
writes only what changed; its shape contract is what it last sent (issue 37).

``tests/data/release-7-synced.sql`` is the ``.dump`` of a state file written by the release
before (main at e2eaab1, schema 7): 30 products synced from ``artikel.csv`` (``ARTIKEL``
below, cp1252, ``;``) into the in-memory fake CMS, then an unchanged run. The fake CMS is
filled again from the state's rows (what the release sent, under the ids it got).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from skuferry import errors
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import Settings
from skuferry.models import RunOptions, RunSummary
from skuferry.state.mirror import Mirror
from skuferry.sync.engine import Adapters, run_once
from tests.fakes import FakeRemote

DATA = Path(__file__).parents[2] / "data"
NAMES = ("Müller Kaffee", "Crème brûlée", "Öl extra", "Süßholz")
ROWS = [(f"{i:05d}", f"{NAMES[i % 4]} {i}", f"{i % 90 + 1},{i % 100:02d}") for i in range(1, 31)]


def _export(path: Path, rows: list[tuple[str, str, str]], header: str = "UnitPrice") -> None:
    text = f"ItemNo;Description;{header}\n" + "".join(";".join(r) + "\n" for r in rows)
    path.write_bytes(text.encode("cp1252"))


def _released(tmp_path: Path) -> tuple[Settings, FakeRemote]:
    state = tmp_path / "state.db"
    conn = sqlite3.connect(state)
    conn.executescript((DATA / "release-7-synced.sql").read_text(encoding="utf-8"))
    remote = FakeRemote()
    for key, sent, remote_id in conn.execute("SELECT key, sent, remote_id FROM products"):
        remote.products[remote_id] = {**json.loads(sent), "id": remote_id}
        assert remote.products[remote_id]["sku"] == key
    conn.close()
    state.chmod(0o600)
    _export(tmp_path / "artikel.csv", ROWS)
    settings = settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k-test"},
            "source": {
                "type": "csv",
                "path": str(tmp_path / "artikel.csv"),
                "delimiter": ";",
                "encoding": "cp1252",
            },
            "mapping": {
                "key": "sku",
                "fields": {
                    "sku": "ItemNo",
                    "name": "Description",
                    "price": {"column": "UnitPrice", "type": "decimal", "decimal": ","},
                },
            },
            "state": {"path": str(state)},
        }
    )
    return settings, remote


def _sync(settings: Settings, remote: FakeRemote, **flags: Any) -> RunSummary:
    return run_once(settings, RunOptions(**flags), adapters=Adapters(client=remote))


def test_the_previous_release_s_state_runs_on_writing_only_what_changed(tmp_path: Path) -> None:
    settings, remote = _released(tmp_path)
    rows = list(ROWS)
    rows[4] = (rows[4][0], rows[4][1], "77,70")
    _export(tmp_path / "artikel.csv", rows)
    summary = _sync(settings, remote)
    assert (summary.created, summary.updated, summary.unchanged) == (0, 1, 29)
    assert remote.requests["write"] == 1 and remote.posts == 0
    keys = remote.keys()
    assert len(keys) == len(set(keys)) == 30, "no duplicates"
    # the first run bound the state to its CMS (a few products looked up by id) and
    # learnt the export's shape; the next reads nothing new and writes nothing
    reads = remote.requests["read"]
    again = _sync(settings, remote)
    assert (again.updated, again.created, remote.requests["write"]) == (0, 0, 1)
    assert remote.requests["read"] == reads
    mirror = Mirror(settings.state.path)
    try:
        status = mirror.shape_status()
        assert status.learned is not None and status.learned.header == (
            "ItemNo", "Description", "UnitPrice",
        )  # fmt: skip
        assert mirror.get_meta("cms.binding") is not None
    finally:
        mirror.close()


def test_a_column_renamed_in_the_upgrade_s_first_run_is_caught(tmp_path: Path) -> None:
    """The state has no shape yet: what it last sent is the contract, so the price
    renamed in the very first run after the upgrade is refused, not nulled."""
    settings, remote = _released(tmp_path)
    before = {rid: dict(p) for rid, p in remote.products.items()}
    _export(tmp_path / "artikel.csv", ROWS, header="Price (EUR)")
    with pytest.raises(errors.ShapeChanged, match="field 'price' reads column 'UnitPrice'"):
        _sync(settings, remote, force=True)
    assert remote.products == before
