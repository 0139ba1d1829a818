"""Keys compare and are stored in Unicode NFC: one function, every place a key enters.

``CAFÉ-001`` with a precomposed ``É`` (NFC) and with ``E`` + U+0301 (NFD) name one
product. Each test below feeds the NFD spelling through one entry point (the mapping,
a bad row, the CSV line route, a join, ``--only``/``--keys-from``/``retry``, a hook,
a walk of the CMS) and finds the NFC key there.
"""

from __future__ import annotations

import sqlite3
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skuferry import canonical
from skuferry.config.schema import FieldSpec, JoinSettings, MappingSettings
from skuferry.models import BadRecord, Kind, MirrorRow, Product, RawLines, RawRecord, State
from skuferry.service.hooks_http import keys_from
from skuferry.sources.csv import CsvSource
from skuferry.state import schema
from skuferry.state.joins import JoinIndex
from skuferry.state.mirror import Mirror
from skuferry.state.remoteindex import RemoteIndex
from skuferry.sync.engine import Adapters, run_once
from skuferry.sync.map.mapper import Mapper
from skuferry.sync.plan import stage as plan_stage
from skuferry.sync.plan.lines import line_route
from skuferry.sync.plan.planner import plan
from skuferry.sync.read.joins import open_joins
from skuferry.sync.read.named import NamedPull, read_keys, unique
from skuferry.sync.read.pieces import assemble, use_keys
from tests.fakes import FakeRemote, ListSource
from tests.unit.sync.test_engine import make_settings, sync


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


CAFE = nfc("CAFÉ-001")
CAFE_NFD = nfd("CAFÉ-001")
KEYS = [nfc(k) for k in ("CAFÉ-001", "CRÈME-002", "ÅNGSTRÖM-003")]


def test_the_spellings_differ_and_the_key_is_one() -> None:
    assert CAFE != CAFE_NFD and len(CAFE_NFD) == len(CAFE) + 1  # the test means something
    assert canonical.key(CAFE_NFD) == CAFE
    assert canonical.key(f"  {CAFE_NFD}\t") == CAFE  # stripped, as keys always were
    assert canonical.key("SKU-1 ") == "SKU-1"
    assert canonical.key("   ") == ""
    assert canonical.key("A\udcff") == "A\udcff"  # an undecodable byte stays (no error)
    assert canonical.key("ﬁ-1") == "ﬁ-1"  # NFC, not NFKC: a compatibility form is kept


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=12))
def test_every_normal_form_of_a_text_is_one_key(text: str) -> None:
    key = canonical.key(text)
    assert unicodedata.is_normalized("NFC", key)
    assert canonical.key(key) == key
    assert canonical.key(nfd(text)) == canonical.key(nfc(text)) == key


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=8), st.sampled_from([" A-1 ", "", CAFE_NFD]))))
def test_a_batch_of_keys_is_each_key(texts: list[str]) -> None:
    assert canonical.keys(texts) == [canonical.key(t) or None for t in texts]
    assert canonical.keys([" A-1", "  ", CAFE_NFD]) == ["A-1", None, CAFE]


# -- the mapping ----------------------------------------------------------------------------


def _mapper(*, fields: bool = True, path: bool = False) -> Mapper:
    if not fields:
        return Mapper(MappingSettings(key="SKU"))  # pass-through
    key = FieldSpec(path="SKU") if path else FieldSpec(column="SKU")
    return Mapper(MappingSettings(key="sku", fields={"sku": key, "name": FieldSpec(column="N")}))


@pytest.mark.parametrize("path", [False, True])
def test_the_mapping_keys_a_record_in_nfc_and_sends_its_key_field_in_nfc(path: bool) -> None:
    mapper = _mapper(path=path)
    record = RawRecord(2, {"SKU": CAFE_NFD, "N": "Coffee"})
    assert mapper.key_of(record) == CAFE
    assert mapper.key_reader()(record) == CAFE
    product = mapper.map(record)
    assert isinstance(product, Product)
    assert product.key == CAFE
    assert product.payload == {"sku": CAFE, "name": "Coffee"}
    again = mapper.map(RawRecord(2, {"SKU": CAFE, "N": "Coffee"}))
    assert isinstance(again, Product)
    assert again.digest == product.digest  # either spelling: nothing to send


def test_a_pass_through_mapping_sends_the_key_column_in_nfc() -> None:
    product = _mapper(fields=False).map(RawRecord(2, {"SKU": CAFE_NFD, "N": "Coffee"}))
    assert isinstance(product, Product)
    assert (product.key, product.payload["SKU"]) == (CAFE, CAFE)


def test_a_refused_row_is_held_under_its_nfc_key() -> None:
    mapper = Mapper(
        MappingSettings(
            key="sku",
            fields={"sku": FieldSpec(column="SKU"), "name": FieldSpec(column="N", required=True)},
        )
    )
    bad = mapper.map(RawRecord(3, {"SKU": CAFE_NFD, "N": None}))
    assert isinstance(bad, BadRecord)
    assert bad.key == CAFE
    # a source's own rejection: with the key, or with the fields it could read
    assert mapper.key_of_bad(BadRecord(4, "torn", key=CAFE_NFD)) == CAFE
    assert mapper.key_of_bad(BadRecord(4, "torn", None, fields={"SKU": CAFE_NFD})) == CAFE


# -- the CSV line route ---------------------------------------------------------------------


@pytest.mark.parametrize("first", [True, False])
def test_the_line_route_keys_an_unparsed_line_in_nfc(tmp_path: Path, first: bool) -> None:
    path = tmp_path / "catalog.csv"
    if first:
        header, row, other = "SKU,N\n", f"{CAFE_NFD},Coffee\n", "SKU-2,Tea\n"
    else:
        header, row, other = "N,SKU\n", f"Coffee,{CAFE_NFD}\n", "Tea,SKU-2\n"
    path.write_text(header + row + other, encoding="utf-8")
    mapper = _mapper()
    route = line_route(CsvSource(path), mapper)
    assert route is not None
    blocks = [b for b in route.records() if type(b) is RawLines]
    keys = [k for block in blocks for k in route.keys(block)]
    assert keys == [CAFE, "SKU-2"]
    parsed = route.parse(2, row)
    assert [mapper.key_reader()(r) for r in parsed if type(r) is RawRecord] == [CAFE]


def _csv(keys: list[str]) -> str:
    return "SKU,Name,Price\n" + "".join(f"{k},Product {i},{i}.50\n" for i, k in enumerate(keys))


def test_an_nfd_export_by_the_line_route_is_the_nfc_catalog_and_its_lines_are_learnt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Found-6 runs through the engine, CSV read line by line: no write, nothing gone,
    and from the second NFD run on its unchanged lines are recognised without parsing."""
    fields = {"sku": "SKU", "name": "Name", "price": {"column": "Price", "type": "decimal"}}
    config = make_settings(
        tmp_path,
        mapping={"key": "sku", "fields": fields},
        gone={"action": "patch", "patch": {"status": "archived"}},
    )
    remote, path = FakeRemote(), tmp_path / "catalog.csv"
    parsed: list[int] = []
    real_route = plan_stage.line_route  # type: ignore[attr-defined]

    def counting_route(source: Any, mapper: Any) -> Any:
        route = real_route(source, mapper)
        assert route is not None
        parse = route.parse

        def counted(line: int, text: str) -> Any:
            parsed.append(line)
            return parse(line, text)

        route.parse = counted  # type: ignore[method-assign]
        return route

    monkeypatch.setattr(plan_stage, "line_route", counting_route)
    counts = []
    for keys in (KEYS, [nfd(k) for k in KEYS], [nfd(k) for k in KEYS], [nfd(k) for k in KEYS]):
        path.write_text(_csv(keys), encoding="utf-8")
        parsed.clear()
        summary = run_once(config, adapters=Adapters(source=CsvSource(path), client=remote))
        assert summary.exit_code == 0
        counts.append(len(parsed))
        assert (summary.created, summary.updated, summary.archived) == (
            (3, 0, 0) if len(counts) == 1 else (0, 0, 0)
        ), summary.as_json()
        assert sorted(remote.keys()) == sorted(KEYS)
    # NFD lines: read once (their record digests changed), learnt once, then recognised
    assert counts == [3, 3, 3, 0]


# -- joins ----------------------------------------------------------------------------------


def test_a_join_index_stores_nfc_keys_and_answers_by_the_callers_spelling(
    tmp_path: Path,
) -> None:
    index = JoinIndex.build(
        tmp_path / "join.sqlite",
        [
            (CAFE_NFD, 2, '{"text": "coffee"}', True),
            (CAFE, 3, '{"text": "again"}', True),  # the same key: a duplicate, first wins
            (nfd("NOËL-4"), 4, "unreadable", False),
        ],
        signature="s",
    )
    try:
        assert index.facts().duplicates == 1
        assert index.get_many([CAFE]) == {CAFE: '{"text": "coffee"}'}
        assert index.get_many([CAFE_NFD, CAFE]) == {
            CAFE_NFD: '{"text": "coffee"}',
            CAFE: '{"text": "coffee"}',
        }
        assert index.held_many([nfc("NOËL-4")]) == {nfc("NOËL-4"): (4, "unreadable")}
    finally:
        index.close()


# -- named keys: --only, --keys-from, retry, hooks ------------------------------------------


def test_named_keys_are_nfc(tmp_path: Path) -> None:
    listed = tmp_path / "keys.txt"
    listed.write_text(f"# to send\n{CAFE_NFD}\n\n {CAFE} \n", encoding="utf-8")
    assert read_keys(listed) == [CAFE, CAFE]
    assert unique([CAFE_NFD, CAFE, " ", nfd("NOËL")]) == [CAFE, nfc("NOËL")]


def test_a_named_pull_of_an_nfd_key_finds_the_nfc_record_and_back() -> None:
    mapper = _mapper()
    records: list[RawRecord | BadRecord] = [
        RawRecord(2, {"SKU": CAFE, "N": "Coffee"}),
        RawRecord(3, {"SKU": "X", "N": "x"}),
    ]

    class Listed:
        name = "list"

        def records(self) -> Any:
            return iter(records)

    named = NamedPull([CAFE_NFD], mapper)
    assert [r.line for r in named.records(Listed())] == [2]  # type: ignore[arg-type]
    assert named.missing == []
    records[0] = RawRecord(2, {"SKU": CAFE_NFD, "N": "Coffee"})
    named = NamedPull([CAFE], mapper)
    assert [r.line for r in named.records(Listed())] == [2]  # type: ignore[arg-type]
    held = NamedPull([CAFE], mapper)
    records[:] = [BadRecord(5, "unreadable", key=CAFE_NFD)]
    assert [r.line for r in held.records(Listed())] == [5]  # type: ignore[arg-type]


def test_a_hook_s_keys_are_nfc() -> None:
    body = f'{{"keys": ["{CAFE_NFD}", "{CAFE}", "SKU-1"]}}'.encode()
    assert keys_from(body) == [CAFE, "SKU-1"]
    akeneo = f'{{"events": [{{"data": {{"resource": {{"identifier": "{CAFE_NFD}"}}}}}}]}}'
    assert keys_from(akeneo.encode()) == [CAFE]


# -- walks of the CMS -----------------------------------------------------------------------


def test_a_walk_indexes_a_remote_nfd_key_as_the_nfc_key(tmp_path: Path) -> None:
    remote = FakeRemote()
    (rid,) = remote.seed({"sku": CAFE_NFD, "name": "Coffee"})
    conn = schema.open_state(tmp_path / "state.db")
    try:
        index = RemoteIndex(conn, "sku")
        index.load(remote)
        assert [r for r, _ in index.find(CAFE)] == [rid]
        assert list(index.pairs()) == [(CAFE, rid)]
        assert index.keyless == 0
    finally:
        conn.close()


# -- the planner ----------------------------------------------------------------------------


def test_an_nfd_record_is_the_nfc_row_unchanged_and_nothing_is_gone() -> None:
    mapper = _mapper()
    payload = {"sku": CAFE, "name": "Coffee"}
    row = MirrorRow(CAFE, State.SYNCED, digest=canonical.digest(payload), remote_id="p1")
    actions = list(
        plan(
            [RawRecord(2, {"SKU": CAFE_NFD, "N": "Coffee"})],
            {CAFE: row},
            walked=True,
            mapper=mapper,
            archiving="a",
        )
    )
    assert [(a.kind, a.key) for a in actions] == [(Kind.UNCHANGED, CAFE)]


# -- an older state file --------------------------------------------------------------------


def test_an_older_state_file_with_an_nfd_key_upgrades_and_syncs_without_a_create(
    tmp_path: Path,
) -> None:
    """A version-6 file that stored the key as the source spelled it (NFD): after the
    upgrade the same export writes the key field in NFC once, then nothing."""
    remote = FakeRemote()
    old = {"sku": CAFE_NFD, "name": "Coffee"}
    cafe_id, tea_id = remote.seed(old, {"sku": "SKU-1", "name": "Tea"})
    config = make_settings(tmp_path, gone={"action": "patch", "patch": {"status": "archived"}})
    conn = sqlite3.connect(config.state.path, isolation_level=None)
    try:
        for migration in schema.MIGRATIONS[:6]:
            migration(conn)
        conn.execute("PRAGMA user_version = 6")
        for key, rid, payload in (
            (CAFE_NFD, cafe_id, old),
            ("SKU-1", tea_id, {"sku": "SKU-1", "name": "Tea"}),
        ):
            # the record digest of its source row, as the version that wrote it recognised it
            record_digest = Mapper(config.mapping).record_digest(RawRecord(2, payload))
            conn.execute(
                "INSERT INTO products (key, state, digest, sent, remote_id, first_seen, "
                "updated_at, synced_at, source_fingerprint) "
                "VALUES (?, 'synced', ?, ?, ?, 1, 1, 1, ?)",
                (key, canonical.digest(payload), canonical.dumps(payload), rid, record_digest),
            )
        conn.execute("INSERT INTO meta VALUES ('walked_at', '1.0')")
    finally:
        conn.close()
    rows = [dict(old), {"sku": "SKU-1", "name": "Tea"}]
    first = sync(config, remote, rows)
    assert (first.created, first.updated, first.archived, first.exit_code) == (0, 1, 0, 0)
    assert sorted(remote.keys()) == sorted([CAFE, "SKU-1"])
    assert remote.products[cafe_id]["sku"] == CAFE
    second = sync(config, remote, rows)
    assert (second.created, second.updated, second.archived) == (0, 0, 0)


def test_a_join_partner_spelled_in_nfd_is_found_and_a_held_one_is_held(tmp_path: Path) -> None:
    """``[[join]]`` ``key`` and ``on`` values compare in NFC, through the record stream."""
    pim = tmp_path / "pim.csv"
    # the partner of CAFÉ in NFD; NOËL's record unreadable with its key read for sure
    # CRÈME's partner in NFC, found from an NFD `on` value
    text = f"sku,text\n{CAFE_NFD},coffee\n{nfc('CRÈME-2')},cream\n{nfd('NOËL-4')},"
    pim.write_bytes(text.encode() + b"caf\xe9\n")
    spec = JoinSettings.model_validate(
        {"name": "pim", "type": "csv", "path": str(pim), "key": "sku", "on": "SKU"}
    )
    (join,) = open_joins([spec], tmp_path)
    try:
        rows = [{"SKU": CAFE}, {"SKU": nfc("NOËL-4")}, {"SKU": nfd("CRÈME-2")}]
        source = assemble(ListSource(rows), MappingSettings(), where=None, joins=[join])
        use_keys(source, _mapper(fields=False).key_of)
        out = list(source.records())
        assert isinstance(out[0], RawRecord)
        assert out[0].fields["pim"] == {"sku": CAFE_NFD, "text": "coffee"}
        assert isinstance(out[1], BadRecord)
        assert out[1].key == nfc("NOËL-4")  # held: its partner could not be read
        assert isinstance(out[2], RawRecord)
        assert out[2].fields["pim"] == {"sku": nfc("CRÈME-2"), "text": "cream"}
    finally:
        join.close()


def test_two_rows_whose_keys_differ_only_in_form_are_one_key_twice() -> None:
    """The same export holding both spellings: one product, a duplicate key when they differ."""
    mapper = _mapper()
    same = list(
        plan(
            [
                RawRecord(2, {"SKU": CAFE, "N": "Coffee"}),
                RawRecord(3, {"SKU": CAFE_NFD, "N": "Coffee"}),
            ],
            {},
            walked=True,
            mapper=mapper,
        )
    )
    assert [(a.kind, a.key) for a in same] == [(Kind.CREATE, CAFE)]
    differ = list(
        plan(
            [
                RawRecord(2, {"SKU": CAFE, "N": "Coffee"}),
                RawRecord(3, {"SKU": CAFE_NFD, "N": "Tea"}),
            ],
            {},
            walked=True,
            mapper=mapper,
        )
    )
    assert differ[-1].kind is Kind.REJECT and differ[-1].key == CAFE
    assert "duplicate key" in (differ[-1].reason or "")


def test_a_walk_recorded_in_the_mirror_stores_its_keys_in_nfc(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "state.db")
    try:
        mirror.mark_walked(1.0, [(CAFE_NFD, "p1"), ("SKU-1", "p2")])
        assert mirror.known()[CAFE].remote_id == "p1"
        assert sorted(mirror.keys(exclude_gone=False)) == sorted([CAFE, "SKU-1"])
    finally:
        mirror.close()
