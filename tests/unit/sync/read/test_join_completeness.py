"""A join's pull proves its partners' absence, or it does not: an empty join is refused,
a join with records it could not read holds every product whose partner is missing,
and the run's ledger (``completeness.py``) is the one place that decides it."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skuferry.completeness import Ledger, Reader, Verdict
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import JoinSettings, MappingSettings, Settings
from skuferry.errors import EmptySourceRefused
from skuferry.models import BadRecord, RawRecord, RunOptions
from skuferry.sources import change_token as change_tokens
from skuferry.sources.base import Source
from skuferry.sync.engine import Adapters, run_once
from skuferry.sync.read.joins import open_joins
from skuferry.sync.read.pieces import Pieces, assemble, use_keys
from tests.fakes import FakeRemote


class ListSource(Source):
    def __init__(self, records: list[RawRecord | BadRecord]) -> None:
        self.items = records

    def records(self) -> Iterator[RawRecord | BadRecord]:
        return iter(self.items)

    def describe(self) -> str:
        return "erp.csv"


def _raw(*skus: str) -> list[RawRecord | BadRecord]:
    return [RawRecord(n, {"SKU": sku}) for n, sku in enumerate(skus, 2)]


def _spec(path: Path, kind: str = "jsonl", **extra: Any) -> JoinSettings:
    return JoinSettings.model_validate(
        {"name": "pim", "type": kind, "path": str(path), "key": "sku", "on": "SKU", **extra}
    )


def _lines(path: Path, *lines: str) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _pim(sku: str, **fields: Any) -> str:
    return json.dumps({"sku": sku, **fields})


def _pieces(
    joins: Any, *skus: str, where: str | None = None, ledger: Ledger | None = None
) -> Pieces:
    source = assemble(
        ListSource(_raw(*skus)), MappingSettings(), where=where, joins=joins, ledger=ledger
    )
    assert isinstance(source, Pieces)
    use_keys(source, lambda record: str(record.fields["SKU"]))
    return source


def _shape(records: list[RawRecord | BadRecord]) -> list[tuple[str, Any]]:
    """Each record as (sku, its partner) or ("held", the product's key)."""
    return [
        ("held", r.key) if isinstance(r, BadRecord) else (r.fields["SKU"], r.fields.get("pim"))
        for r in records
    ]


# --- an empty join ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind", "content"),
    [
        ("pim.jsonl", "jsonl", b""),  # 0 bytes: a copy that has not started, a failed export
        ("pim.jsonl", "jsonl", b"\n\n"),
        ("pim.csv", "csv", b"sku,name\n"),  # the header and nothing else
    ],
)
def test_an_empty_join_is_refused_naming_the_join_and_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, kind: str, content: bytes
) -> None:
    monkeypatch.setattr(change_tokens, "RACY_S", 0.0)  # so the second open reuses the index
    path = tmp_path / name
    path.write_bytes(content)
    for _ in range(2):  # built, then reused: the index remembers it is empty
        with pytest.raises(EmptySourceRefused) as refused:
            open_joins([_spec(path, kind)], tmp_path)
        assert str(refused.value) == (
            f"join 'pim' ({name}) is empty: it gave no record, so every product would lose "
            "its partner (and take the join's default); nothing was written (a failed "
            "export?). Pass --allow-empty-source if this is intended."
        )
    (join,) = open_joins([_spec(path, kind)], tmp_path, allow_empty=True)
    assert not join.read, "the index was reused"
    assert join.verdict == Verdict(Reader.JOIN, "pim", complete=True), "empty on purpose"
    join.close()


def test_a_join_whose_filter_leaves_every_record_out_is_not_empty(tmp_path: Path) -> None:
    path = tmp_path / "pim.jsonl"
    _lines(path, _pim("A", enabled=False))
    (join,) = open_joins([_spec(path, where="enabled")], tmp_path)
    assert join.facts.read == 1 and join.facts.records == 0
    assert _shape(list(_pieces([join], "A").records())) == [("A", None)]
    join.close()


# --- a join with records it could not read -------------------------------------------------


def test_a_join_reports_its_verdict_and_a_reused_index_carries_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(change_tokens, "RACY_S", 0.0)
    path = tmp_path / "pim.jsonl"
    _lines(path, _pim("A", name="Drill"), '{"sku": "B", "na', _pim("C", name="Saw"))
    for read in (True, False):
        ledger = Ledger()
        (join,) = open_joins([_spec(path)], tmp_path)
        assert join.read is read
        _pieces([join], "A", ledger=ledger)
        (verdict,) = ledger.verdicts()
        assert (verdict.reader, verdict.where, verdict.complete) == (Reader.JOIN, "pim", False)
        assert verdict.reason.startswith(
            "1 record(s) of pim.jsonl could not be read (first: pim.jsonl:2: "
        ), verdict.reason
        assert not ledger.may_default("pim")
        join.close()


def test_a_record_unreadable_in_the_middle_holds_only_the_missing_partners(
    tmp_path: Path,
) -> None:
    """Line 3 of the PIM is not JSON: the join cannot say whether D's partner was there.
    A and C have theirs and sync; D and E, whose partners are missing, are held."""
    path = tmp_path / "pim.jsonl"
    _lines(path, _pim("A", name="Drill"), _pim("C", name="Saw"), "{not json", _pim("F"))
    (join,) = open_joins([_spec(path)], tmp_path)
    records = list(_pieces([join], "A", "D", "C", "E").records())
    assert _shape(records) == [
        ("A", {"sku": "A", "name": "Drill"}),
        ("held", "D"),
        ("C", {"sku": "C", "name": "Saw"}),
        ("held", "E"),
    ]
    assert isinstance(records[1], BadRecord)
    assert records[1].reason.startswith(
        "erp.csv line 3: its partner in join 'pim' (key 'D') may be in pim.jsonl:3, which "
        "could not be read: pim.jsonl line 3: not valid JSON"
    ), records[1].reason
    join.close()


class _Says(Ledger):
    """A ledger whose answer on defaults is fixed: shows who decides."""

    def __init__(self, answer: bool) -> None:
        super().__init__()
        self.answer = answer
        self.asked: list[str] = []

    def may_default(self, join: str) -> bool:
        self.asked.append(join)
        return self.answer


def test_the_runs_ledger_alone_decides_whether_a_missing_partner_may_be_null(
    tmp_path: Path,
) -> None:
    whole, broken = tmp_path / "whole.jsonl", tmp_path / "broken.jsonl"
    _lines(whole, _pim("A"))
    _lines(broken, _pim("A"), "{not json")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (complete,) = open_joins([_spec(whole)], tmp_path / "a")
    (incomplete,) = open_joins([_spec(broken)], tmp_path / "b")

    # a complete join, and a ledger that knows better (another reader said no): held
    records = list(_pieces([complete], "A", "B", ledger=_Says(False)).records())
    assert _shape(records) == [("A", {"sku": "A"}), ("held", "B")]
    assert isinstance(records[1], BadRecord) and records[1].reason == (
        "erp.csv line 3: its partner in join 'pim' (key 'B') is missing, and the join's read "
        "is not complete"
    )
    # a join with an unreadable record, and a ledger that says yes: null
    says = _Says(True)
    assert _shape(list(_pieces([incomplete], "A", "B", ledger=says).records())) == [
        ("A", {"sku": "A"}),
        ("B", None),
    ]
    assert says.asked and set(says.asked) == {"pim"}
    complete.close()
    incomplete.close()


# --- where through a join -----------------------------------------------------------------


def test_where_through_a_join_holds_a_record_without_a_partner(tmp_path: Path) -> None:
    path = tmp_path / "pim.jsonl"
    _lines(path, _pim("A", enabled="yes"), _pim("B", enabled="no"))
    (join,) = open_joins([_spec(path)], tmp_path)
    source = _pieces([join], "A", "B", "C", where="pim.enabled == 'yes'")
    records = list(source.records())
    assert _shape(records) == [("A", {"sku": "A", "enabled": "yes"}), ("held", "C")]
    assert source.skipped == 1, "B's partner says no: skipped, so gone"
    assert isinstance(records[1], BadRecord) and records[1].reason == (
        "erp.csv line 4: [source] where: reads 'pim.enabled', but this record has no partner "
        "in join 'pim', so its value is unknown; held, not skipped (write pim.enabled || "
        "<value> to say what a missing partner means)"
    )
    assert (
        "1 record(s) held: [source] where reads 'pim.enabled', and they have no partner in "
        "join 'pim'"
    ) in source.notes()

    fallback = _pieces([join], "A", "C", where="(pim.enabled || 'no') == 'yes'")
    assert _shape(list(fallback.records())) == [("A", {"sku": "A", "enabled": "yes"})]
    assert fallback.skipped == 1, "the user said what a missing partner means"
    join.close()


# --- a whole run: the ledger is the run's ----------------------------------------------------


def _settings(tmp_path: Path) -> Settings:
    return settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k-test"},
            "source": {"type": "jsonl", "path": "erp.jsonl"},
            "join": [{"name": "pim", "type": "jsonl", "path": "pim.jsonl", "key": "sku",
                      "on": "SKU"}],
            "mapping": {"key": "sku", "fields": {"sku": "SKU", "name": {"path": "pim.name",
                        "default": "Artikel"}}},
            "state": {"path": "state.db"},
        },
        base_dir=tmp_path,
    )  # fmt: skip


def test_a_run_reports_each_join_to_its_summary_and_refuses_an_empty_one(tmp_path: Path) -> None:
    _lines(tmp_path / "erp.jsonl", json.dumps({"SKU": "A"}), json.dumps({"SKU": "B"}))
    _lines(tmp_path / "pim.jsonl", _pim("A", name="Drill"), "{not json")
    settings, remote = _settings(tmp_path), FakeRemote()

    summary = run_once(settings, adapters=Adapters(client=remote))

    joins = [v for v in summary.completeness.verdicts() if v.reader is Reader.JOIN]
    assert [(v.where, v.complete) for v in joins] == [("pim", False)]
    assert (summary.created, summary.rejected) == (1, 1), "B is held, not named 'Artikel'"
    assert [p["key"] for p in summary.problems] == ["B"]

    (tmp_path / "pim.jsonl").write_bytes(b"")
    with pytest.raises(EmptySourceRefused):
        run_once(settings, adapters=Adapters(client=remote))
    forced = run_once(
        settings, RunOptions(allow_empty_source=True), adapters=Adapters(client=remote)
    )
    assert forced.exit_code == 0 and forced.created == 1, "B is created with its default"


# --- generated PIM exports: a record is joined to its partner, held, or proven partnerless ----


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["A", "B", "C", "D", "E"]), st.sampled_from(["ok", "bad", "gone"])
        ),
        max_size=6,
    ),
    st.lists(st.sampled_from(["A", "B", "C", "D", "E", "F"]), min_size=1, max_size=6),
)
def test_every_record_is_joined_held_or_proven_without_a_partner(
    pim: list[tuple[str, str]], skus: list[str]
) -> None:
    """Whatever the PIM holds (records, lines that are not JSON, records left out), a
    primary record gets its partner's whole record, or is held, or (only when every line
    of the PIM was read) has no partner."""
    lines = []
    for sku, kind in pim:
        if kind == "ok":
            lines.append(_pim(sku, name=f"name {sku}"))
        elif kind == "bad":
            lines.append('{"sku": "' + sku + '", "name": ')  # a record that is not JSON
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "pim.jsonl"
        _lines(path, *lines)
        if not lines:
            with pytest.raises(EmptySourceRefused):
                open_joins([_spec(path)], Path(folder))
            return
        (join,) = open_joins([_spec(path)], Path(folder))
        try:
            records = list(_pieces([join], *skus).records())
        finally:
            join.close()
    whole = all(kind != "bad" for _, kind in pim)
    found = {sku for sku, kind in pim if kind == "ok"}  # a whole record is used when found
    for sku, (state, partner) in zip(skus, _shape(records), strict=True):
        if sku in found:
            assert (state, partner) == (sku, {"sku": sku, "name": f"name {sku}"})
        elif whole:
            assert (state, partner) == (sku, None), "every line read: no partner, proven"
        else:
            assert (state, partner) == ("held", sku), "a line unread: the partner is unknown"
