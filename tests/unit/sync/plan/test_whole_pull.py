"""Whether a pull read the whole source has one home: the run's ledger (issue 40, item 24).

The guards' ratios and the expiry of the plan's dead letters ask ``Ledger.whole_pull``
(the pull's own verdict), as the gone decisions ask ``may_mark_gone``; the read stage
keeps no ``full`` flag of its own beside it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from skuferry import errors
from skuferry.completeness import Ledger, Reader
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import Settings
from skuferry.models import Action, Kind, Product, RunOptions, RunSummary
from skuferry.state.mirror import Mirror
from skuferry.sync.plan import stage as plan_stage
from skuferry.sync.read import stage as read_stage


@dataclass
class _Run:
    """What the plan stage reads of a run, the ledger given."""

    settings: Settings
    mirror: Mirror
    ledger: Ledger
    options: RunOptions = field(default_factory=RunOptions)
    summary: RunSummary = field(default_factory=RunSummary)
    archiving: str | None = None

    def guard_gone(self, leaving: int, known: int) -> None:
        del leaving, known

    def sending(self, updates: Iterable[Action]) -> int:
        return len(list(updates))


class _Store:
    """A plan of ``updates`` updates and a refusal, as the guard and refusals read it."""

    def __init__(self, updates: int) -> None:
        self.updates = updates
        self.records = updates

    def keys(self, kind: Kind) -> Iterator[str]:
        return iter([f"K-{i}" for i in range(self.updates)] if kind is Kind.UPDATE else [])

    def actions(self, *kinds: Kind) -> Iterator[Action]:
        if Kind.REJECT in kinds:
            yield Action(Kind.REJECT, "K-X", reason="bad price", line=9, stage="map")
        if Kind.UPDATE in kinds:
            yield from (Action(Kind.UPDATE, f"K-{i}") for i in range(self.updates))


class _Shape:
    def judge_keys(self, created: list[str], vanished: object) -> None:
        del created, vanished


@dataclass
class _Read:
    shape: _Shape = field(default_factory=_Shape)


def _run(tmp_path: Path, *, whole: bool) -> _Run:
    settings = settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k"},
            "source": {"type": "csv", "path": str(tmp_path / "x.csv")},
            "mapping": {"key": "sku"},
            "state": {"path": str(tmp_path / "state.db")},
        }
    )
    mirror = Mirror(settings.state.path)
    mirror.note_refusals(
        [("K-OLD", "map", "an old refusal", 3)], source="x.csv", whole=False
    )  # a dead letter a whole pull that does not refuse it again ends
    ledger = Ledger()
    if whole:
        ledger.complete(Reader.SOURCE, "x.csv")
    else:
        ledger.incomplete(Reader.SOURCE, "x.csv", "an incremental pull")
    return _Run(settings, mirror, ledger)


def _counts(updates: int) -> dict[Kind, int]:
    return dict.fromkeys(Kind, 0) | {Kind.UPDATE: updates, Kind.UNCHANGED: 1}


@pytest.mark.parametrize("whole", [True, False])
def test_the_guards_count_over_a_pull_the_ledger_says_is_whole(tmp_path: Path, whole: bool) -> None:
    run = _run(tmp_path, whole=whole)
    for i in range(20):
        product = Product(f"K-{i}", {"sku": f"K-{i}"}, f"d{i}", i + 2)
        run.mirror.record_created(product, f"r{i}")
    try:
        if whole:
            with pytest.raises(errors.ChangeGuardTripped):
                plan_stage.guard(run, _Store(15), _counts(15), _Read())  # type: ignore[arg-type]
        else:  # 15 of 20 updated in an incremental pull: no ratio to guard
            plan_stage.guard(run, _Store(15), _counts(15), _Read())  # type: ignore[arg-type]
    finally:
        run.mirror.close()


@pytest.mark.parametrize("whole", [True, False])
def test_the_plan_s_dead_letters_expire_after_a_pull_the_ledger_says_is_whole(
    tmp_path: Path, whole: bool
) -> None:
    run = _run(tmp_path, whole=whole)
    plan_stage.note_refusals(run, _Store(0), _opened())  # type: ignore[arg-type]
    slots = {letter.key for letter in run.mirror.dead_letters()}
    assert slots == ({"K-X"} if whole else {"K-X", "K-OLD"})
    run.mirror.close()


def test_the_read_stage_keeps_no_full_flag_beside_the_ledger() -> None:
    assert not hasattr(read_stage.Opened, "full")


def _opened() -> object:
    class _Source:
        name = "x.csv"

    class _Opened:
        source = _Source()

    return _Opened()
