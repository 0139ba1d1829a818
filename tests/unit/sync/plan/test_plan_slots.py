"""The planner decides exactly what the plain rule decides, record by record.

``plan()`` pairs records with their rows in batches, recognises unchanged rows by one
hash, marks seen keys by one bit of their row (``MirrorLookup.slots``, or a plain dict
numbered in its own order) and, given ``recognised``, yields no action for them (the
plan store counts them). Every catalog below is planned three ways: by ``_reference``
(the rule applied one record at a time: no batch, no slot, no bitmap), by ``plan()``
over a plain dict of ``MirrorRow``, and by ``plan()`` over the SQLite mirror into a
``PlanStore``. Same final actions, same counts, same unchanged keys; duplicates, bad
rows and gone keys included, across batch boundaries (``LOOKAHEAD`` is made small).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skuferry import canonical
from skuferry.config.schema import FieldSpec, MappingSettings
from skuferry.models import Action, BadRecord, Kind, MirrorRow, Product, RawRecord, State
from skuferry.state.mirror import Mirror
from skuferry.state.reads import MirrorLookup
from skuferry.state.scratch import slot_pages
from skuferry.sync.map.mapper import Mapper
from skuferry.sync.plan import numbered as numbered_module
from skuferry.sync.plan.planner import Tally, decide, leaving, plan

MAPPING = MappingSettings(
    key="sku", fields={"sku": "SKU", "price": FieldSpec(column="Price", type="decimal")}
)
KEYS = ["A", "B", "C", "D", "E", "F"]
# What the mirror holds for a key: (state, remote id, digest of price 1 or 2, record digest?,
# open intent?, rejected digest)
STATES = ["synced", "rejected", "pending", "failed", "drift", "gone", "archived", "remote_only"]


def raw(line: int, sku: str, price: str) -> RawRecord:
    return RawRecord(line, {"SKU": sku, "Price": price})


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[Mirror]:
    m = Mirror(tmp_path / "state.db")
    yield m
    m.close()


def _fill_mirror(mirror: Mirror, rows: list[dict[str, Any]]) -> None:
    mapper = Mapper(MAPPING)
    conn = mirror.db.conn
    now = time.time()
    for r in rows:
        product = mapper.map(raw(1, r["key"], r["price"]))
        assert isinstance(product, Product)
        digest = product.digest if r["digest"] else None
        conn.execute(
            "INSERT INTO products (key, state, digest, rejected_digest, sent, source_fingerprint,"
            " remote_id, first_seen, updated_at) VALUES (?,?,?,?,?,?,?,?,?)",
            (
                r["key"],
                r["state"],
                digest,
                product.digest if r["state"] in ("rejected", "archived") else None,
                canonical.dumps(product.payload),
                product.record_digest if r["fingerprint"] else None,
                f"r-{r['key']}" if r["remote_id"] else None,
                now,
                now,
            ),
        )
        if r["intent"]:
            conn.execute(
                "INSERT INTO intents (key, digest, payload, started_at) VALUES (?,?,?,?)",
                (r["key"], product.digest, "{}", now),
            )
    conn.commit()


def _records(source: list[tuple[str, Any, str]]) -> list[RawRecord | BadRecord]:
    out: list[RawRecord | BadRecord] = []
    for line, (what, key, price) in enumerate(source, start=2):
        if what == "raw":
            out.append(raw(line, key, price))
        elif what == "bad":  # a row the source could not read; its key cells are sure
            out.append(BadRecord(line, f"line {line}: bad", fields={"SKU": key}))
        else:  # no key at all
            out.append(BadRecord(line, f"line {line}: unreadable"))
    return out


def _final(actions: list[Action]) -> dict[str, tuple[Any, ...]]:
    """The last action per key (or per line for keyless rejects), as the store keeps it."""
    out: dict[str, tuple[Any, ...]] = {}
    for a in actions:
        product = a.product
        write = a.kind in (Kind.CREATE, Kind.UPDATE, Kind.RESTORE)
        out[a.key if a.key is not None else f"#{a.line}"] = (
            a.kind,
            a.reason,
            a.remote_id if a.kind is not Kind.UNCHANGED else None,
            a.lookup_first,
            product.digest if product and write else None,
        )
    return out


_REFUSED = object()  # the reference's seen digest of a key rejected in the run


def _reference(
    records: Iterable[RawRecord | BadRecord],
    rows: dict[str, MirrorRow],
    *,
    archiving: str | None = None,
) -> tuple[list[Action], Tally]:
    """The plain rule, one record at a time and in source order, slow and obviously right.

    Each record is recognised (its row SYNCED with a confirmed digest and this very
    record digest, no open intent: unchanged, never mapped) or mapped, and decided against
    its row on its key's first row; a repeat with other data rejects the key for the run;
    a bad row holds its key. After a full pull without an unsure row, each key never seen
    is passed to ``leaving``."""
    mapper = Mapper(MAPPING)
    actions: list[Action] = []
    first: dict[str, tuple[object, int, dict[str, Any] | None]] = {}  # digest, line, payload
    tally = Tally()
    for record in records:
        bad: BadRecord | None = None
        product: Product | None = None
        recognised = False
        if isinstance(record, BadRecord):
            bad = dataclasses.replace(record, key=mapper.key_of_bad(record))
        else:
            key = mapper.key_of(record)
            row = rows.get(key) if key is not None else None
            if (
                row is not None
                and row.state is State.SYNCED
                and row.intent_digest is None
                and row.digest is not None
                and row.record_digest is not None
                and mapper.record_digest(record) == row.record_digest
            ):
                product, recognised = Product(key, {}, row.digest, record.line), True  # type: ignore[arg-type]
            else:
                mapped = mapper.map(record)
                bad, product = (mapped, None) if isinstance(mapped, BadRecord) else (None, mapped)
        if bad is not None:
            reason = bad.reason
            if bad.key is None or bad.guessed:
                tally.unsure += 1
            if bad.key is not None:
                earlier = first.get(bad.key)
                if earlier is not None and earlier[0] is not _REFUSED:
                    reason = (
                        f"duplicate key {bad.key!r}: line {bad.line} repeats "
                        f"line {earlier[1]}: {reason}"
                    )
                first[bad.key] = (_REFUSED, earlier[1] if earlier else bad.line, None)
            actions.append(
                Action(Kind.REJECT, bad.key, reason=reason, line=bad.line, stage=bad.stage)
            )
            continue
        assert product is not None
        earlier = first.get(product.key)
        if earlier is None:
            first[product.key] = (
                product.digest, product.line, None if recognised else product.payload
            )  # fmt: skip
            actions.append(
                Action(Kind.UNCHANGED, product.key, product, line=product.line)
                if recognised
                else decide(product, rows.get(product.key), walked=True)
            )
            continue
        digest, line, payload = earlier
        if digest is _REFUSED or digest == product.digest:
            continue
        first[product.key] = (_REFUSED, line, None)
        reason = f"duplicate key {product.key!r}: line {product.line} differs from line {line}"
        if payload is not None:
            fields = sorted(
                k for k in payload.keys() | product.payload.keys()
                if payload.get(k, _REFUSED) != product.payload.get(k, _REFUSED)
            )  # fmt: skip
            reason = f"{reason} ({', '.join(fields)})" if fields else reason
        actions.append(
            Action(Kind.REJECT, product.key, line=product.line, reason=reason, stage="check")
        )
    if tally.unsure:
        tally.gone_skipped = True  # a full pull: the unsure rows alone stop the gone decisions
        return actions, tally
    for key, row in rows.items():
        if key not in first and (kind := leaving(row, archiving=archiving)) is not None:
            actions.append(Action(kind, key, remote_id=row.remote_id))
    return actions, tally


def _plan_both(
    mirror: Mirror, records: list[RawRecord | BadRecord], *, archiving: str | None = None
) -> tuple[dict[str, tuple[Any, ...]], Tally, dict[str, tuple[Any, ...]], Tally, Any]:
    """The reference's plan, and ``plan()``'s over the SQLite mirror into a store; ``plan()``
    over a plain dict of the same rows is held to the reference here too."""
    known = mirror.known()
    plain = {key: known[key] for key in known}
    reference, tally_plain = _reference(records, plain, archiving=archiving)
    tally_dict, tally_fast = Tally(), Tally()
    over_dict = list(
        plan(records, plain, walked=True, mapper=Mapper(MAPPING), tally=tally_dict,
             archiving=archiving)
    )  # fmt: skip
    assert _final(over_dict) == _final(reference), "plan() over a plain dict"
    assert tally_dict == tally_plain
    store = mirror.plan_store()
    store.fill(
        plan(
            records,
            known,
            walked=True,
            mapper=Mapper(MAPPING),
            seen=mirror.seen_table(),
            tally=tally_fast,
            archiving=archiving,
            recognised=store.recognised,
        )
    )
    planned = sum(1 for a in reference if a.kind not in (Kind.GONE, Kind.ARCHIVE))
    return _final(reference), tally_plain, _stored(store), tally_fast, (store, planned)


def _stored(store: Any) -> dict[str, tuple[Any, ...]]:
    """The plan store's actions and recognised keys, as ``_final`` sums actions up."""
    fast: dict[str, tuple[Any, ...]] = {}
    for a in store.actions(*Kind):
        slot = a.key if a.key is not None else f"#{a.line}"
        fast[slot] = _final([a])[slot]
    for key in store.keys(Kind.UNCHANGED):
        fast[key] = (Kind.UNCHANGED, None, None, False, None)
    return fast


def _assert_same(
    reference: dict[str, tuple[Any, ...]], tally_plain: Tally, store: Any, tally_fast: Tally
) -> None:
    """The store planned what the reference planned: actions, tallies and counts."""
    assert _stored(store) == reference
    assert (tally_fast.unsure, tally_fast.gone_skipped) == (
        tally_plain.unsure,
        tally_plain.gone_skipped,
    )
    counts = store.counts()
    for kind in Kind:
        assert counts[kind] == sum(1 for v in reference.values() if v[0] is kind), kind


def _check(mirror: Mirror, records: list[RawRecord | BadRecord]) -> Any:
    reference, tally_plain, _, tally_fast, (store, planned) = _plan_both(mirror, records)
    _assert_same(reference, tally_plain, store, tally_fast)
    assert store.records == planned, "records planned, recognised ones included"
    return store


def _synced(key: str, price: str = "1") -> dict[str, Any]:
    return {
        "key": key,
        "price": price,
        "state": "synced",
        "remote_id": True,
        "digest": True,
        "fingerprint": True,
        "intent": False,
    }


def test_a_quiet_catalog_yields_no_action_and_counts_every_row(mirror: Mirror) -> None:
    _fill_mirror(mirror, [_synced(k) for k in KEYS])
    records = _records([("raw", k, "1") for k in KEYS])
    store = mirror.plan_store()
    actions = list(
        plan(records, mirror.known(), walked=True, mapper=Mapper(MAPPING),
             seen=mirror.seen_table(), recognised=store.recognised)
    )  # fmt: skip
    assert actions == [], "recognised rows are bits, not actions"
    store.fill(actions)
    assert store.counts()[Kind.UNCHANGED] == len(KEYS)
    assert sorted(store.keys(Kind.UNCHANGED)) == KEYS
    assert store.records == len(KEYS)


def test_a_late_conflicting_duplicate_overrules_a_recognised_row(
    mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(numbered_module, "LOOKAHEAD", 2)  # the repeat in a later batch
    _fill_mirror(mirror, [_synced(k) for k in KEYS])
    records = _records([("raw", "A", "1"), ("raw", "B", "1"), ("raw", "C", "1"),
                        ("raw", "A", "2"), ("raw", "B", "1")])  # fmt: skip
    store = _check(mirror, records)
    counts = store.counts()
    assert (counts[Kind.UNCHANGED], counts[Kind.REJECT]) == (2, 1)
    assert sorted(store.keys(Kind.UNCHANGED)) == ["B", "C"]
    reject = next(store.actions(Kind.REJECT))
    assert reject.reason == "duplicate key 'A': line 5 differs from line 2"
    assert counts[Kind.GONE] == 3, "D, E and F left the source"


def test_a_bad_row_holds_a_recognised_product_and_a_keyless_one_stops_gone(
    mirror: Mirror,
) -> None:
    _fill_mirror(mirror, [_synced(k) for k in KEYS])
    held = _check(mirror, _records([("raw", "A", "1"), ("bad", "A", ""), ("bad", "B", "")]))
    counts = held.counts()
    assert (counts[Kind.UNCHANGED], counts[Kind.REJECT], counts[Kind.GONE]) == (0, 2, 4)
    unsure = _check(mirror, _records([("raw", "A", "1"), ("none", None, "")]))
    assert unsure.counts()[Kind.GONE] == 0, "a row that could be any product: nothing gone"


def test_a_create_in_doubt_is_looked_up_not_recognised(mirror: Mirror) -> None:
    """A SYNCED row with an open intent: its POST may have landed, whatever the record digest."""
    _fill_mirror(mirror, [{**_synced("A"), "intent": True}, _synced("B")])
    store = _check(mirror, _records([("raw", "A", "1"), ("raw", "B", "1")]))
    (create,) = store.actions(Kind.CREATE)
    assert (create.key, create.lookup_first) == ("A", True)
    assert list(store.keys(Kind.UNCHANGED)) == ["B"]


def test_the_gone_pass_reads_only_the_rows_never_seen(mirror: Mirror) -> None:
    rows = [_synced(k) for k in KEYS]
    rows[1] = {**rows[1], "state": "archived"}
    rows[2] = {**rows[2], "intent": True}
    _fill_mirror(mirror, rows)
    store = _check(mirror, _records([("raw", "F", "1")]))
    assert sorted(store.keys(Kind.GONE)) == ["A", "C", "D", "E"]
    archive = _plan_both(mirror, _records([("raw", "F", "1")]), archiving="patch-digest")
    assert archive[2] == archive[0]


def test_keys_in_order_are_read_as_a_range_unless_it_is_sparse(mirror: Mirror) -> None:
    many = [f"K{i:03d}" for i in range(300)]
    _fill_mirror(mirror, [_synced(k) for k in many])
    known = MirrorLookup(mirror.db.conn)
    statements: list[str] = []
    mirror.db.conn.set_trace_callback(statements.append)
    dense = known.recognisable(many[10:60])  # in order, 50 of 50 rows in the range
    assert set(dense) == set(many[10:60]) and any("p.key >= " in s for s in statements)
    statements.clear()
    sparse = known.recognisable([many[0], many[299]])  # the range holds 300 rows: IN (...)
    assert set(sparse) == {many[0], many[299]} and any("p.key IN (" in s for s in statements)
    mirror.db.conn.set_trace_callback(None)
    records = _records([("raw", k, "2" if k.endswith("7") else "1") for k in many[::3]])
    _check(mirror, records)  # a third of the keys, in order: read as ranges, planned alike


def test_slot_pages_walk_set_and_clear_bits() -> None:
    bits = bytearray(b"\x00\xff\x05")
    assert [s for page in slot_pages(bits, marked=True, page=3) for s in page] == [
        *range(8, 16),
        16,
        18,
    ]
    assert [s for page in slot_pages(bits, marked=False) for s in page] == [
        *range(8),
        17,
        *range(19, 24),
    ]


_entry = st.one_of(
    st.builds(lambda price: {k: v for k, v in _synced("", price).items() if k != "key"},
              st.sampled_from(["1", "2"])),  # recognisable: the case the fast path is for
    st.fixed_dictionaries(
        {
            "price": st.sampled_from(["1", "2"]),
            "state": st.sampled_from(STATES),
            "remote_id": st.booleans(),
            "digest": st.booleans(),
            "fingerprint": st.booleans(),
            "intent": st.booleans(),
        }
    ),
)  # fmt: skip
_source_row = st.tuples(
    st.sampled_from(["raw", "raw", "raw", "raw", "bad", "none"]),
    st.sampled_from(KEYS),
    st.sampled_from(["1", "1", "2", "x"]),  # "x": the mapping refuses it
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    held=st.dictionaries(st.sampled_from(KEYS), _entry, max_size=len(KEYS)),
    source=st.lists(_source_row, max_size=14),
    lookahead=st.sampled_from([1, 3, 2000]),
)
def test_generated_catalogs_plan_as_the_reference_does(
    tmp_path_factory: pytest.TempPathFactory,
    held: dict[str, dict[str, Any]],
    source: list[tuple[str, Any, str]],
    lookahead: int,
) -> None:
    saved = numbered_module.LOOKAHEAD
    numbered_module.LOOKAHEAD = lookahead
    m = Mirror(tmp_path_factory.mktemp("slots") / "state.db")
    try:
        _fill_mirror(m, [{"key": k, **v} for k, v in sorted(held.items())])
        _check(m, _records(source))
    finally:
        numbered_module.LOOKAHEAD = saved
        m.close()


def test_the_fast_key_and_fingerprint_equal_the_mapper_s_own() -> None:
    mapper = Mapper(MAPPING)
    key_of, record_digest = mapper.key_reader(), mapper.record_digester()
    for record in [
        raw(2, " A ", "1.5"),
        raw(3, "", "1"),
        RawRecord(4, {"SKU": 12346, "Price": "1"}),
        RawRecord(5, {"Price": "1"}),  # no key column: the slow path
        RawRecord(6, {"SKU": "B"}),
    ]:
        assert key_of(record) == mapper.key_of(record)
        assert record_digest(record) == mapper.record_digest(record)


# -- the line route (sync/plan/lines.py): CSV lines recognised by their text -------------------

# "SKU,Note,Price": the same line text means another price than under "SKU,Price,Note"
_HEADERS = ["SKU,Price,Note", "Price,SKU,Note", "SKU,Note,Price", "\ufeffSKU,Price,Note"]
_NOTES = ["", "1", "2", "a b", '"q,1"', '"two\nlines"', '"un', "x,extra"]


def _csv_line(sku: str, price: str, note: str, header: str) -> str:
    cells = {"SKU": sku, "Price": price, "Note": note}
    return ",".join(cells[name] for name in header.lstrip("\ufeff").split(","))


def _write_catalog(path: Path, header: str, rows: list[tuple[str, str, str]], brk: str) -> None:
    text = header + brk
    for sku, price, note in rows:
        text += "" if sku == "<blank>" else _csv_line(sku, price, note, header)
        text += brk
    path.write_bytes(text.encode("utf-8"))


def _counting(parse: Any, parsed: list[int]) -> Any:
    def counted(line: int, text: str) -> Any:
        parsed.append(line)
        return parse(line, text)

    return counted


def _route(path: Path, block: int) -> Any:
    from skuferry.sources.csv import CsvSource
    from skuferry.sync.plan.lines import LineRoute

    return LineRoute(CsvSource(path).lines(block=block), Mapper(MAPPING), "SKU")


def _learn(mirror: Mirror, path: Path, block: int) -> int:
    """Plan ``path`` by the line route as a run would, and store the digests it learnt."""
    store = mirror.plan_store()
    route = _route(path, block)
    store.fill(
        plan(route.records(), mirror.known(), walked=True, mapper=Mapper(MAPPING),
             seen=mirror.seen_table(), recognised=store.recognised, lines=route,
             learn=store.learn)
    )  # fmt: skip
    learnt = mirror.remember_line_digests(store.line_digests())
    store.close()
    return learnt


def _check_lines(mirror: Mirror, path: Path, block: int) -> Any:
    """Plan ``path`` by the reference (records, a plain dict mirror) and by the line route."""
    from skuferry.sources.csv import CsvSource

    known = mirror.known()
    plain = {key: known[key] for key in known}
    tally_fast = Tally()
    actions, tally_plain = _reference(CsvSource(path).records(), plain)
    reference = _final(actions)
    store = mirror.plan_store()
    route = _route(path, block)
    store.fill(
        plan(route.records(), known, walked=True, mapper=Mapper(MAPPING),
             seen=mirror.seen_table(), tally=tally_fast, recognised=store.recognised,
             lines=route)
    )  # fmt: skip
    _assert_same(reference, tally_plain, store, tally_fast)
    return store


def _mutate(mirror: Mirror, key: str, how: str) -> None:
    """What may happen to a row between the run that learnt its line and the next."""
    conn = mirror.db.conn
    other = Mapper(MAPPING).map(raw(1, key, "2"))
    assert isinstance(other, Product)
    if how == "written":  # updated to price 2: new digest and record digest, old line digest
        conn.execute(
            "UPDATE products SET digest = ?, source_fingerprint = ? WHERE key = ?",
            (other.digest, other.record_digest, key),
        )
    elif how == "cleared":  # a walk or an adoption forgot the record digest
        conn.execute("UPDATE products SET source_fingerprint = NULL WHERE key = ?", (key,))
    elif how == "intent":
        conn.execute(
            "INSERT OR REPLACE INTO intents (key, digest, payload, started_at) VALUES (?,?,?,?)",
            (key, other.digest, "{}", time.time()),
        )
    elif how in STATES:
        conn.execute("UPDATE products SET state = ? WHERE key = ?", (how, key))
    conn.commit()


_row = st.tuples(
    st.sampled_from([*KEYS, "<blank>"]),
    st.sampled_from(["1", "1", "1", "2", "x"]),
    st.sampled_from(_NOTES),
)
_in_step = st.builds(lambda: {k: v for k, v in _synced("").items() if k != "key"})
# Mostly rows a line can be learnt for (SYNCED at price 1), so that the next plan meets them.
_held = st.dictionaries(
    st.sampled_from(KEYS), st.one_of(_in_step, _in_step, _entry), min_size=2, max_size=len(KEYS)
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    held=_held,
    before=st.lists(_row, max_size=10),
    edits=st.lists(st.tuples(st.integers(0, 12), st.one_of(st.none(), _row)), max_size=5),
    mutations=st.dictionaries(
        st.sampled_from(KEYS),
        st.sampled_from(["written", "cleared", "intent", "synced", "rejected", "gone"]),
        max_size=3,
    ),
    headers=st.tuples(st.sampled_from(_HEADERS), st.sampled_from(_HEADERS)),
    brks=st.tuples(st.sampled_from(["\n", "\r\n"]), st.sampled_from(["\n", "\r\n"])),
    block=st.sampled_from([1, 2, 2000]),
    lookahead=st.sampled_from([1, 3, 2000]),
)
def test_the_line_route_plans_what_records_plan(  # noqa: PLR0917 - hypothesis' draws
    tmp_path_factory: pytest.TempPathFactory,
    held: dict[str, dict[str, Any]],
    before: list[tuple[str, str, str]],
    edits: list[tuple[int, tuple[str, str, str] | None]],
    mutations: dict[str, str],
    headers: tuple[str, str],
    brks: tuple[str, str],
    block: int,
    lookahead: int,
) -> None:
    """A catalog learnt by one run, edited (rows changed, added, removed, a header or line
    breaks changed), rows of the mirror changed meanwhile: the next plan by lines equals
    today's plan by records."""
    saved = numbered_module.LOOKAHEAD
    numbered_module.LOOKAHEAD = lookahead
    folder = tmp_path_factory.mktemp("lines")
    m = Mirror(folder / "state.db")
    try:
        _fill_mirror(m, [{"key": k, **v} for k, v in sorted(held.items())])
        after = list(before)
        for at, row in edits:
            if row is None:
                if after:
                    del after[at % len(after)]
            else:
                after.insert(at % (len(after) + 1), row)
        path = folder / "catalog.csv"
        _write_catalog(path, headers[0], before, brks[0])
        _learn(m, path, block)
        for key, how in mutations.items():
            _mutate(m, key, how)
        _write_catalog(path, headers[1], after, brks[1])
        _check_lines(m, path, block)
    finally:
        numbered_module.LOOKAHEAD = saved
        m.close()


def test_a_learnt_line_is_recognised_unparsed_and_a_changed_one_is_read(
    tmp_path: Path, mirror: Mirror
) -> None:
    _fill_mirror(mirror, [_synced(k) for k in KEYS])
    path = tmp_path / "catalog.csv"
    _write_catalog(path, "SKU,Price,Note", [(k, "1", "n") for k in KEYS], "\n")
    assert _learn(mirror, path, 2) == len(KEYS), "the first run learns every line"
    assert _learn(mirror, path, 2) == 0, "the second recognises every line by its text"
    parsed: list[int] = []
    route = _route(path, 2)
    original = route.parse
    route.parse = _counting(original, parsed)
    store = mirror.plan_store()
    list(plan(route.records(), mirror.known(), walked=True, mapper=Mapper(MAPPING),
              seen=mirror.seen_table(), recognised=store.recognised, lines=route))  # fmt: skip
    assert parsed == [] and store.counts()[Kind.UNCHANGED] == len(KEYS)
    store.close()
    rows = [(k, "2" if k == "C" else "1", "n") for k in KEYS]
    _write_catalog(path, "SKU,Price,Note", rows, "\n")
    parsed.clear()
    route = _route(path, 2)
    original = route.parse
    route.parse = _counting(original, parsed)
    store = mirror.plan_store()
    store.fill(
        plan(route.records(), mirror.known(), walked=True, mapper=Mapper(MAPPING),
             seen=mirror.seen_table(), recognised=store.recognised, lines=route)
    )  # fmt: skip
    assert parsed == [4], "only C's line is read"
    assert [a.key for a in store.actions(Kind.UPDATE)] == ["C"]
    assert store.counts()[Kind.UNCHANGED] == len(KEYS) - 1


@pytest.mark.parametrize(
    "header",
    ["SKU,Note,Price", "\ufeffSKU,Note,Price", "SKU, Note ,Price"],
)
def test_the_same_line_under_another_header_is_read_again(
    tmp_path: Path, mirror: Mirror, header: str
) -> None:
    """ "A,1,2" is price 1 under SKU,Price,Note and price 2 under SKU,Note,Price."""
    _fill_mirror(mirror, [_synced("A"), _synced("B")])
    path = tmp_path / "catalog.csv"
    path.write_bytes(b"SKU,Price,Note\nA,1,2\nB,1,1\n")
    assert _learn(mirror, path, 2) == 2
    path.write_bytes(f"{header}\nA,1,2\nB,1,1\n".encode())
    store = _check_lines(mirror, path, 2)
    assert [a.key for a in store.actions(Kind.UPDATE)] == ["A"]


def test_another_mapping_reads_every_line_again(tmp_path: Path, mirror: Mirror) -> None:
    """The mapping is in the line digest: under another one no line is recognised by text."""
    _fill_mirror(mirror, [_synced(k) for k in KEYS])
    path = tmp_path / "catalog.csv"
    _write_catalog(path, "SKU,Price,Note", [(k, "1", "n") for k in KEYS], "\n")
    assert _learn(mirror, path, 2) == len(KEYS)
    from skuferry.sources.csv import CsvSource
    from skuferry.sync.plan.lines import LineRoute

    other = MappingSettings(
        key="sku", fields={"sku": "SKU", "price": FieldSpec(column="Price", type="string")}
    )
    parsed: list[int] = []
    route = LineRoute(CsvSource(path).lines(block=2), Mapper(other), "SKU")
    original = route.parse
    route.parse = _counting(original, parsed)  # type: ignore[method-assign]
    list(plan(route.records(), mirror.known(), walked=True, mapper=Mapper(other),
              seen=mirror.seen_table(), lines=route))  # fmt: skip
    assert parsed == list(range(2, 2 + len(KEYS)))
