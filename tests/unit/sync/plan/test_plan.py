"""The planner, rule by rule with plain data, then one property over generated catalogs.

Whole runs (planner, writer and engine together) are ``test_run_machine.py``'s model-based test.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skuferry import canonical
from skuferry.config.schema import MappingSettings
from skuferry.models import Action, BadRecord, Kind, MirrorRow, Product, State
from skuferry.sync.map.mapper import Mapper
from skuferry.sync.plan import planner as plan_module
from skuferry.sync.plan.planner import Tally, decide, plan


def prod(key: str, line: int = 1, **fields: Any) -> Product:
    payload = {"sku": key, **fields}
    return Product(key=key, payload=payload, digest=canonical.digest(payload), line=line)


P = prod("A-1", price=10)
OTHER = prod("A-1", price=11).digest


def row(state: State, **kw: Any) -> MirrorRow:
    return MirrorRow(key="A-1", state=state, **kw)


def last_by_key(actions: Iterable[Action]) -> dict[str | None, Action]:
    return {a.key: a for a in actions}


# -- decide(): one product against one mirror row ---------------------------------------


@pytest.mark.parametrize("walked", [False, True])
def test_unknown_key_is_created_looking_up_first_unless_walked(walked: bool) -> None:
    action = decide(P, None, walked=walked)
    assert (action.kind, action.product, action.lookup_first) == (Kind.CREATE, P, not walked)


@pytest.mark.parametrize("state", [State.PENDING, State.FAILED, State.GONE])
def test_open_intent_always_looks_up_before_creating(state: State) -> None:
    action = decide(P, row(state, intent_digest=P.digest), walked=True)
    assert (action.kind, action.lookup_first) == (Kind.CREATE, True)


def test_synced_same_digest_is_unchanged() -> None:
    action = decide(P, row(State.SYNCED, digest=P.digest, remote_id="r1"), walked=True)
    assert (action.kind, action.remote_id) == (Kind.UNCHANGED, "r1")


def test_synced_different_digest_is_updated_in_place() -> None:
    action = decide(P, row(State.SYNCED, digest=OTHER, remote_id="r1"), walked=False)
    assert (action.kind, action.remote_id, action.product) == (Kind.UPDATE, "r1", P)


def test_rejected_same_data_is_not_resent() -> None:
    action = decide(P, row(State.REJECTED, digest=P.digest, last_error="bad price"), walked=True)
    assert (action.kind, action.reason) == (Kind.STILL_REJECTED, "bad price")


def test_rejected_changed_data_with_remote_id_is_updated() -> None:
    action = decide(P, row(State.REJECTED, digest=OTHER, remote_id="r1"), walked=True)
    assert (action.kind, action.remote_id) == (Kind.UPDATE, "r1")


@pytest.mark.parametrize("walked", [False, True])
def test_rejected_changed_data_without_remote_id_is_created(walked: bool) -> None:
    action = decide(P, row(State.REJECTED, digest=OTHER), walked=walked)
    assert (action.kind, action.lookup_first) == (Kind.CREATE, not walked)


def test_failed_with_remote_id_is_updated_even_with_the_confirmed_digest() -> None:
    # The failed update may have been applied: only a fresh update makes it certain.
    action = decide(P, row(State.FAILED, digest=P.digest, remote_id="r1"), walked=True)
    assert (action.kind, action.remote_id) == (Kind.UPDATE, "r1")


@pytest.mark.parametrize("walked", [False, True])
def test_failed_without_remote_id_is_created(walked: bool) -> None:
    action = decide(P, row(State.FAILED, last_error="429"), walked=walked)
    assert (action.kind, action.lookup_first) == (Kind.CREATE, not walked)


def test_drift_back_to_the_confirmed_digest_is_unchanged() -> None:
    action = decide(P, row(State.DRIFT, digest=P.digest, remote_id="r1"), walked=True)
    assert action.kind is Kind.UNCHANGED


def test_drift_with_other_data_is_updated() -> None:
    action = decide(P, row(State.DRIFT, digest=OTHER, remote_id="r1"), walked=True)
    assert (action.kind, action.remote_id) == (Kind.UPDATE, "r1")


def test_duplicate_is_rechecked_by_lookup() -> None:
    action = decide(P, row(State.DUPLICATE, digest=P.digest, remote_id="r1"), walked=True)
    assert (action.kind, action.lookup_first) == (Kind.CREATE, True)


@pytest.mark.parametrize(
    ("digest", "kind"), [(P.digest, Kind.UNCHANGED), (OTHER, Kind.UPDATE), (None, Kind.UPDATE)]
)
def test_gone_that_came_back_with_remote_id_goes_by_digest(digest: str | None, kind: Kind) -> None:
    action = decide(P, row(State.GONE, digest=digest, remote_id="r1"), walked=True)
    assert (action.kind, action.remote_id) == (kind, "r1")


def test_gone_that_came_back_without_remote_id_is_created() -> None:
    action = decide(P, row(State.GONE, digest=P.digest), walked=True)
    assert (action.kind, action.lookup_first) == (Kind.CREATE, False)


def test_pending_without_remote_id_looks_up_even_after_a_walk() -> None:
    # e.g. its remote id answered 404: it may have been re-created under another id.
    action = decide(P, row(State.PENDING), walked=True)
    assert (action.kind, action.lookup_first) == (Kind.CREATE, True)


def test_adopted_but_not_yet_updated_is_updated() -> None:
    action = decide(P, row(State.PENDING, digest=None, remote_id="r9"), walked=True)
    assert (action.kind, action.remote_id) == (Kind.UPDATE, "r9")


# -- plan(): the catalog as a stream -----------------------------------------------------


def test_bad_records_are_rejected_with_line_and_reason() -> None:
    bad = BadRecord(line=7, reason="line 7, column price: not a number", key="B-2")
    keyless = BadRecord(line=8, reason="line 8: no sku")
    actions = list(plan([bad, keyless], {}, walked=True))
    assert actions == [
        Action(Kind.REJECT, "B-2", reason=bad.reason, line=7, stage="read"),
        Action(Kind.REJECT, None, reason=keyless.reason, line=8, stage="read"),
    ]


def test_an_identical_repeat_is_ignored() -> None:
    actions = list(plan([prod("A-1", 3, price=1), prod("A-1", 9, price=1)], {}, walked=True))
    assert [(a.kind, a.line) for a in actions] == [(Kind.CREATE, 3)]


def test_a_conflicting_repeat_rejects_the_key_naming_both_lines_and_the_field() -> None:
    records = [
        prod("A-1", 3, price=1, name="x"),
        prod("B-1", 4),
        prod("A-1", 17, price=2, name="x"),
    ]
    actions = list(plan(records, {}, walked=True))
    final = last_by_key(actions)
    assert final["A-1"].kind is Kind.REJECT
    assert final["A-1"].reason == "duplicate key 'A-1': line 17 differs from line 3 (price)"
    assert final["A-1"].line == 17
    assert final["B-1"].kind is Kind.CREATE


def test_a_conflicting_key_stays_rejected_for_the_run() -> None:
    records = [prod("A-1", 1, price=1), prod("A-1", 2, price=2), prod("A-1", 3, price=1)]
    actions = list(plan(records, {}, walked=True))
    assert [a.kind for a in actions] == [Kind.CREATE, Kind.REJECT]


def test_a_bad_record_repeating_a_valid_key_rejects_the_key() -> None:
    bad = BadRecord(line=9, reason="column price: not a number", key="A-1")
    records: list[Product | BadRecord] = [prod("A-1", 3), bad, prod("A-1", 12)]
    final = last_by_key(plan(records, {}, walked=True))
    assert final["A-1"].kind is Kind.REJECT
    assert final["A-1"].reason == (
        "duplicate key 'A-1': line 9 repeats line 3: column price: not a number"
    )


def test_conflict_reason_without_the_field_once_the_first_payload_is_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(plan_module, "PAYLOAD_CACHE_SIZE", 1)
    records = [prod("A-1", 1, price=1), prod("B-1", 2), prod("A-1", 3, price=2)]
    final = last_by_key(plan(records, {}, walked=True))
    assert final["A-1"].reason == "duplicate key 'A-1': line 3 differs from line 1"


def test_keys_that_left_the_source_are_gone_once() -> None:
    mirror = {
        "A-1": MirrorRow("A-1", State.SYNCED, digest=P.digest, remote_id="r1"),
        "B-1": MirrorRow("B-1", State.SYNCED, digest="d", remote_id="r2"),
        "C-1": MirrorRow("C-1", State.GONE, digest="d", remote_id="r3"),
        "D-1": MirrorRow("D-1", State.REJECTED, digest="d"),
        "E-1": MirrorRow("E-1", State.FAILED),
    }
    records: list[Product | BadRecord] = [P, BadRecord(line=2, reason="unreadable", key="E-1")]
    actions = list(plan(records, mirror, walked=True))
    gone = [(a.key, a.remote_id) for a in actions if a.kind is Kind.GONE]
    assert gone == [("B-1", "r2"), ("D-1", None)]  # C-1 already gone, E-1 still in the source


# -- held, not gone: a product whose row is present but unreadable -----------------------

SYNCED = {k: MirrorRow(k, State.SYNCED, digest=k, remote_id=k) for k in ("A-1", "B-1", "C-1")}
MAPPER = Mapper(MappingSettings(key="sku", fields={"sku": "SKU", "name": "Name"}))
ARCHIVING = "patch-digest"


def _kinds(actions: Iterable[Action]) -> dict[str | None, Kind]:
    return {a.key: a.kind for a in actions}


@pytest.mark.parametrize("archiving", [None, ARCHIVING])
def test_a_bad_row_whose_key_is_sure_holds_its_product_and_the_rest_is_decided(
    archiving: str | None,
) -> None:
    # A bad byte in the name: the source hands over the cells, the mapping finds the key.
    bad = BadRecord(3, "c.csv line 3, column 'Name': invalid utf-8", fields={"SKU": " A-1 "})
    tally = Tally()
    records = [bad]
    actions = list(
        plan(records, SYNCED, walked=True, mapper=MAPPER, archiving=archiving, tally=tally)
    )
    leaving = Kind.ARCHIVE if archiving else Kind.GONE
    assert _kinds(actions) == {"A-1": Kind.REJECT, "B-1": leaving, "C-1": leaving}
    assert actions[0] == Action(Kind.REJECT, "A-1", reason=bad.reason, line=3, stage="read")
    assert (tally.unsure, tally.gone_skipped) == (0, False)


@pytest.mark.parametrize("archiving", [None, ARCHIVING])
@pytest.mark.parametrize(
    "bad",
    [
        BadRecord(4, "c.csv line 4: a quote opened here ..."),  # nothing sure in the row
        BadRecord(4, "c.csv line 4: ...", fields={"Name": "Lamp"}),  # the key cell is not sure
        BadRecord(4, "c.csv line 4: ...", fields={"SKU": "A-\udce9"}),  # a bad byte in the key
        BadRecord(4, "c.csv line 4, column 'SKU': the key 'sku' is empty"),  # the mapper's
    ],
)
def test_a_bad_row_without_a_readable_key_stops_every_gone_decision(
    bad: BadRecord, archiving: str | None
) -> None:
    tally = Tally()
    records: list[Product | BadRecord] = [bad, prod("C-1", 5)]
    actions = list(
        plan(records, SYNCED, walked=True, mapper=MAPPER, archiving=archiving, tally=tally)
    )
    assert _kinds(actions) == {None: Kind.REJECT, "C-1": Kind.UPDATE}  # A-1, B-1: no decision
    assert (tally.unsure, tally.gone_skipped) == (1, True)


def test_a_row_with_shifted_fields_holds_the_key_it_reads_and_stops_gone_decisions() -> None:
    # "4 fields, the header has 3": the key read by position is likely right, not sure.
    shifted = BadRecord(4, "c.csv line 4: 4 fields", fields={"SKU": "A-1"}, guessed=True)
    tally = Tally()
    actions = list(plan([shifted], SYNCED, walked=True, mapper=MAPPER, tally=tally))
    assert _kinds(actions) == {"A-1": Kind.REJECT}
    assert (tally.unsure, tally.gone_skipped) == (1, True)


def test_an_incremental_pull_counts_unsure_rows_but_skips_nothing() -> None:
    tally = Tally()
    actions = list(plan([BadRecord(2, "unreadable")], SYNCED, walked=True, full=False, tally=tally))
    assert _kinds(actions) == {None: Kind.REJECT}
    assert (tally.unsure, tally.gone_skipped) == (1, False)  # an incremental pull decides no gone


def test_mirror_keys_limits_the_gone_pass() -> None:
    mirror = {k: MirrorRow(k, State.SYNCED, digest="d", remote_id=k) for k in ("B", "C")}
    actions = list(plan([], mirror, walked=True, mirror_keys=["C"]))
    assert [(a.kind, a.key) for a in actions] == [(Kind.GONE, "C")]


def test_a_given_seen_mapping_is_filled_with_digest_and_first_line() -> None:
    seen: dict[str, tuple[str, int]] = {}
    a = prod("A-1", 5, price=1)
    list(plan([a, prod("A-1", 6, price=1)], {}, walked=True, seen=seen))
    assert seen == {"A-1": (a.digest, 5)}


# -- generated catalogs against generated mirrors ----------------------------------------

KEYS = ["A", "B", "C", "D", "E"]
REFUSED = "!"  # the model API rejects any payload whose name is this


@dataclass
class Row:
    """The model mirror's row, with the columns the real mirror keeps."""

    state: State
    digest: str | None = None  # confirmed on the remote
    rejected_digest: str | None = None
    remote_id: str | None = None
    intent: str | None = None

    def view(self, key: str) -> MirrorRow:
        shown = self.rejected_digest if self.state is State.REJECTED else self.digest
        return MirrorRow(key, self.state, shown, self.remote_id, self.intent)


@dataclass
class World:
    remote: dict[str, dict[str, Any]]
    mirror: dict[str, Row]
    walked: bool
    ids: int = 0

    def new_id(self) -> str:
        self.ids += 1
        return f"r{self.ids}"

    def holding(self, key: str) -> list[str]:
        return [rid for rid, body in self.remote.items() if body["sku"] == key]

    def view(self) -> dict[str, MirrorRow]:
        return {k: r.view(k) for k, r in self.mirror.items()}


def payloads(key: str, *, names: list[str] | None = None) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "sku": st.just(key),
            "price": st.integers(0, 2),
            "name": st.sampled_from(names or ["ok", "x", REFUSED]),
        }
    )


SCENARIOS = [
    "absent",
    "orphan",
    "synced",
    "pending_landed",
    "pending_lost",
    "failed_id",
    "failed_noid",
    "rejected_noid",
    "rejected_id",
    "drift",
    "gone_id",
    "gone_noid",
    "missing",
    "adopted",
    "unknown_landed",
    "unknown_lost",
    "missing_recreated",
]


@st.composite
def worlds(draw: st.DrawFn) -> World:
    walked = draw(st.booleans())
    world = World(remote={}, mirror={}, walked=walked)
    for key in KEYS:
        scenario = draw(st.sampled_from(SCENARIOS))
        if scenario == "orphan" and walked:
            scenario = "absent"  # after a walk, every remote key is known to the mirror
        on_remote = draw(payloads(key, names=["ok", "x"]))
        refused = draw(payloads(key, names=[REFUSED]))
        d = canonical.digest(on_remote)
        if scenario in (
            "orphan",
            "synced",
            "pending_landed",
            "failed_id",
            "rejected_id",
            "drift",
            "gone_id",
            "adopted",
            "unknown_landed",
            "missing_recreated",
        ):
            rid = world.new_id()
            world.remote[rid] = on_remote
        if scenario == "failed_id":  # the failed update's outcome is unknown: it may have landed
            attempted = draw(payloads(key, names=["ok"]))
            world.remote[rid] = draw(st.sampled_from([on_remote, attempted]))
        states = {
            "pending_landed": Row(State.PENDING, intent=d),
            "pending_lost": Row(State.PENDING, intent=d),
            "failed_noid": Row(State.FAILED),
            "rejected_noid": Row(State.REJECTED, rejected_digest=canonical.digest(refused)),
            "gone_noid": Row(State.GONE),
            "missing": Row(State.PENDING),
            "missing_recreated": Row(State.PENDING),  # its id 404'd; someone re-created it
            # a create whose response was lost: FAILED, intent still open
            "unknown_landed": Row(State.FAILED, intent=d),
            "unknown_lost": Row(State.FAILED, intent=d),
        }
        with_id = {
            "failed_id": State.FAILED,
            "drift": State.DRIFT,
            "gone_id": State.GONE,
            "synced": State.SYNCED,
        }
        if scenario in with_id:
            world.mirror[key] = Row(with_id[scenario], d, remote_id=rid)
        elif scenario == "rejected_id":
            world.mirror[key] = Row(State.REJECTED, d, canonical.digest(refused), remote_id=rid)
        elif scenario == "adopted":
            world.mirror[key] = Row(State.PENDING, None, remote_id=rid)
        elif scenario in states:
            world.mirror[key] = states[scenario]
    return world


@st.composite
def catalogs(draw: st.DrawFn) -> list[Product | BadRecord]:
    records: list[Product | BadRecord] = []
    for line in range(1, draw(st.integers(0, 9)) + 1):
        key = draw(st.sampled_from(KEYS))
        if draw(st.integers(0, 9)) == 0:
            bad_key = draw(st.none() | st.just(key))
            records.append(BadRecord(line=line, reason="unreadable", key=bad_key))
        else:
            payload = draw(payloads(key))
            records.append(Product(key, payload, canonical.digest(payload), line))
    return records


def valid_keys(records: list[Product | BadRecord]) -> dict[str, Product]:
    """Keys with one consistent valid product and no bad record."""
    firsts: dict[str, Product] = {}
    spoiled: set[str] = set()
    for r in records:
        if isinstance(r, BadRecord):
            if r.key is not None:
                spoiled.add(r.key)
        elif r.key in firsts and firsts[r.key].digest != r.digest:
            spoiled.add(r.key)
        else:
            firsts.setdefault(r.key, r)
    return {k: p for k, p in firsts.items() if k not in spoiled}


@given(records=catalogs(), world=worlds())
def test_a_conflicting_key_never_gets_a_write_after_its_reject(
    records: list[Product | BadRecord], world: World
) -> None:
    actions = list(plan(records, world.view(), walked=world.walked))
    final = last_by_key(actions)
    spoiled = {r.key for r in records if r.key is not None} - set(valid_keys(records))
    for key in spoiled:
        assert final[key].kind is Kind.REJECT
        first_reject = next(
            i for i, a in enumerate(actions) if a.key == key and a.kind is Kind.REJECT
        )
        assert all(a.key != key for a in actions[first_reject + 1 :] if a.kind is not Kind.REJECT)


@given(records=catalogs(), world=worlds(), archiving=st.none() | st.just(ARCHIVING))
def test_a_held_product_is_never_written_nor_gone(
    records: list[Product | BadRecord], world: World, archiving: str | None
) -> None:
    """A key with a bad row ends REJECTed (the last action for a key wins), never GONE or
    ARCHIVEd; a bad row without a key stops every gone move."""
    actions = list(plan(records, world.view(), walked=world.walked, archiving=archiving))
    held = {r.key for r in records if isinstance(r, BadRecord) and r.key is not None}
    final = last_by_key(actions)
    assert all(final[key].kind is Kind.REJECT for key in held)
    assert not [a for a in actions if a.key in held and a.kind in (Kind.GONE, Kind.ARCHIVE)]
    if any(isinstance(r, BadRecord) and r.key is None for r in records):
        assert not [a for a in actions if a.kind in (Kind.GONE, Kind.ARCHIVE)]


# -- retry: refused data sent again ---------------------------------------------------------


def test_resend_sends_data_the_api_refused_by_the_normal_rules() -> None:
    refused_create = row(State.REJECTED, digest=P.digest)
    assert decide(P, refused_create, walked=True).kind is Kind.STILL_REJECTED
    again = decide(P, refused_create, walked=False, resend=True)
    assert (again.kind, again.lookup_first) == (Kind.CREATE, True), "looked up first"
    refused_update = row(State.REJECTED, digest=P.digest, remote_id="r1")
    update = decide(P, refused_update, walked=True, resend=True)
    assert (update.kind, update.remote_id) == (Kind.UPDATE, "r1")
    refused_restore = row(State.ARCHIVED, digest=P.digest, remote_id="r1")
    assert decide(P, refused_restore, walked=True, resend=True).kind is Kind.RESTORE


def test_plan_resends_only_the_named_keys_and_tags_each_refusal_with_its_stage() -> None:
    mirror = {
        "A-1": row(State.REJECTED, digest=P.digest),
        "B-1": MirrorRow("B-1", State.REJECTED, digest=prod("B-1").digest),
    }
    records: list[Product | BadRecord] = [P, prod("B-1"), BadRecord(3, "bad", "C-1", stage="map")]
    records.append(prod("D-1", line=4))
    records.append(prod("D-1", line=5, price=2))
    actions = last_by_key(plan(records, mirror, walked=True, resend={"A-1"}))
    assert actions["A-1"].kind is Kind.CREATE
    assert actions["B-1"].kind is Kind.STILL_REJECTED
    assert (actions["C-1"].kind, actions["C-1"].stage) == (Kind.REJECT, "map")
    assert (actions["D-1"].kind, actions["D-1"].stage) == (Kind.REJECT, "check")
