"""Pairing records with their rows: plain mirrors numbered, the bitmap, lines without a reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from skuferry.config.schema import MappingSettings
from skuferry.models import MirrorRow, RawLines, RawRecord, State
from skuferry.state.mirror import Mirror
from skuferry.sync.map.mapper import Mapper
from skuferry.sync.plan.bits import Bits
from skuferry.sync.plan.numbered import Numbered, SlottedMirror, numbered
from skuferry.sync.plan.planner import plan

ROWS = {
    "A": MirrorRow("A", State.SYNCED, digest="dA", remote_id="rA", record_digest="fA"),
    "B": MirrorRow("B", State.SYNCED, digest="dB", remote_id="rB"),  # no record digest
    "C": MirrorRow("C", State.SYNCED, digest="dC", remote_id="rC", record_digest="fC",
                   intent_digest="dX"),  # a create in doubt
    "D": MirrorRow("D", State.DRIFT, digest="dD", remote_id="rD", record_digest="fD"),
    "E": MirrorRow("E", State.SYNCED, digest="dE", remote_id="rE", record_digest="fE"),
}  # fmt: skip


def test_a_plain_mirror_is_numbered_in_its_own_order() -> None:
    rows = dict(ROWS)
    mirror = numbered(rows)
    assert isinstance(mirror, Numbered) and mirror.slots() == len(ROWS) + 1
    assert mirror.recognisable(["A", "B", "C", "D", "E", "Z"]) == {
        "A": ("A", 1, "dA", "fA", None),
        "E": ("E", 5, "dE", "fE", None),
    }, "SYNCED, a digest and a fingerprint, no create in doubt; no line digest"
    assert mirror.slotted(["B", "Z", "D"]) == {"B": (2, ROWS["B"]), "D": (4, ROWS["D"])}
    rows["F"] = MirrorRow("F", State.SYNCED)  # added after the numbers were taken
    assert mirror.slotted(["F"])["F"][0] >= mirror.slots(), "no slot: as a row added mid-plan"
    seen = Bits.sized(8)
    for slot in (0, 2, 5):
        seen.add(slot)
    assert [row.key for row in mirror.unseen(seen.data)] == ["A", "C", "D"]


def test_the_state_file_is_asked_as_it_is(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "state.db")
    try:
        known = mirror.known()  # numbered by rowid already
        assert isinstance(known, SlottedMirror) and numbered(known) is known
    finally:
        mirror.close()


def test_a_bit_is_claimed_once() -> None:
    bits = Bits.sized(20)
    assert len(bits.data) == 3 and 9 not in bits
    assert bits.claim(9) and 9 in bits
    assert not bits.claim(9), "already set"
    assert bits.data == bytearray(b"\x00\x02\x00")
    assert all(slot not in bits for slot in range(20) if slot != 9)


def test_lines_without_their_reader_are_refused() -> None:
    mapper = Mapper(MappingSettings(key="sku", fields={"sku": "SKU"}))
    records: list[RawRecord | RawLines] = [RawRecord(2, {"SKU": "A"}), RawLines(3, ["B\n"])]
    with pytest.raises(TypeError, match="line reader"):
        list(plan(records, {}, walked=True, mapper=mapper))
