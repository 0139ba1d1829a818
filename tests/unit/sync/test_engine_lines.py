"""Whole runs over a CSV by the line route against the same runs without it.

Two state files, two fake remotes, the same catalogs in turn: one engine takes the
line route (``sync/plan/lines.py``), the other is denied it (the plan stage's ``line_route`` returns
None) and reads every row into a record as before. After each run the summaries, the
remote products and the mirrors' rows must be the same; the line route must have
recognised lines unparsed by then (its digests are learnt from the second run on).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from skuferry.models import RunSummary
from skuferry.sources.csv import CsvSource
from skuferry.sync.engine import Adapters, run_once
from skuferry.sync.plan import stage as plan_stage
from tests.fakes import FakeRemote
from tests.unit.sync.test_engine import make_settings

HEADER = "SKU,Name,Price\n"
PLAIN = [f"SKU-{i:03d},Product {i},{i}.50\n" for i in range(40)]


def _catalog(*, changes: dict[int, str] | None = None, extra: str = "", crlf: bool = False) -> str:
    rows = list(PLAIN)
    for at, line in (changes or {}).items():
        rows[at] = line
    text = HEADER + "".join(rows) + extra
    return text.replace("\n", "\r\n") if crlf else text


# Each catalog follows the one before it: quiet runs, a changed price, a quoted row, a
# multi-line name, a duplicate key (same and different data), a bad row, removed rows,
# CRLF line breaks, a BOM, the header's columns in another order.
STEPS = [
    _catalog(),
    _catalog(),
    _catalog(changes={3: "SKU-003,Product 3,9.99\n"}),
    _catalog(changes={3: "SKU-003,Product 3,9.99\n", 5: 'SKU-005,"Product, five",5.50\n'}),
    _catalog(extra='SKU-040,"two\nlines",1\nSKU-001,Product 1,1.50\nSKU-002,Product 2,7\n'),
    _catalog(extra='SKU-041,"unclosed,1\nSKU-042,Product 42,x\n'),
    _catalog(changes={7: "\n", 8: ",,\n"}),
    _catalog(crlf=True),
    _catalog(crlf=True),
    "\ufeff" + _catalog(),
    _catalog(),
    "Name,SKU,Price\n" + "".join(f"Product {i},SKU-{i:03d},{i}.50\n" for i in range(40)),
]


def _run(settings: Any, remote: FakeRemote, path: Path) -> RunSummary:
    return run_once(settings, adapters=Adapters(source=CsvSource(path), client=remote))


def _summary(summary: RunSummary) -> dict[str, Any]:
    return {k: v for k, v in summary.as_json().items() if k not in ("duration_s",)}


def _rows(path: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT key, state, digest, source_fingerprint, rejected_digest, last_error "
            "FROM products ORDER BY key"
        ).fetchall()
    finally:
        conn.close()


def _learnt(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        query = "SELECT count(*) FROM products WHERE source_line_digest IS NOT NULL"
        return int(conn.execute(query).fetchone()[0])
    finally:
        conn.close()


def test_runs_by_lines_equal_runs_by_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields = {"sku": "SKU", "name": "Name", "price": {"column": "Price", "type": "decimal"}}
    over: dict[str, Any] = {"mapping": {"key": "sku", "fields": fields}}
    by_lines = make_settings(tmp_path / "lines", **over)
    by_records = make_settings(tmp_path / "records", **over)
    remotes = FakeRemote(), FakeRemote()
    path = tmp_path / "catalog.csv"
    parsed: list[int] = []
    real_route = plan_stage.line_route  # type: ignore[attr-defined]

    def counting_route(source: Any, mapper: Any) -> Any:
        route = real_route(source, mapper)
        if route is not None:
            parse = route.parse

            def counted(line: int, text: str) -> Any:
                parsed.append(line)
                return parse(line, text)

            route.parse = counted  # type: ignore[method-assign]
        return route

    counts: list[int] = []
    for step, text in enumerate(STEPS):
        path.write_bytes(text.encode("utf-8"))
        parsed.clear()
        monkeypatch.setattr(plan_stage, "line_route", counting_route)
        got = _run(by_lines, remotes[0], path)
        monkeypatch.setattr(plan_stage, "line_route", lambda source, mapper: None)
        want = _run(by_records, remotes[1], path)
        assert _summary(got) == _summary(want), f"step {step}"
        assert _rows(by_lines.state.path) == _rows(by_records.state.path), f"step {step}"
        assert sorted(map(str, remotes[0].products.values())) == sorted(
            map(str, remotes[1].products.values())
        ), f"step {step}"
        if step == 1:  # the first quiet run learnt the lines the second recognises
            assert _learnt(by_lines.state.path) == len(PLAIN)
            assert _learnt(by_records.state.path) == 0
        counts.append(len(parsed))
    # Lines parsed per run: every one on the first run and while their digests are learnt
    # (the first quiet run; after the line breaks, the BOM or the header changed); then
    # only a line that changed, or whose row was written since its digest was learnt
    # (SKU-003, step 5), a duplicate that differs, and blank lines (step 6). Quoted lines
    # are read by the csv reader, never parsed as lines.
    assert counts == [40, 40, 1, 1, 3, 1, 2, 40, 0, 40, 40, 40]
