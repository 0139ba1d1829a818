"""Whole runs, model-based: the real ``run_once`` against a source and a remote that change.

A hypothesis state machine (after vdirsyncer's ``SyncMachine``) edits the source
catalog, lets staff edit, delete and create products on the remote, arms faults for
the next run (lost responses, timeouts, 429s, the process dying on either side of
the server's commit or before any transaction of the mirror, a failing walk,
inconsistent list pages: empty, short, repeated, ``meta.pages`` changing) and runs
``run_once`` (plain or ``verify``) on one state file that outlives every crash. Each
example draws PATCH or PUT, 1 or 3 writes in flight, a create-only column or none,
``[gone]`` archiving or none, and a list that shows writes at once or lags behind them
(on a fake clock: waiting for the list costs no time), with ``[api] list_lag_s``
bounding that lag. A page shifted by a concurrent delete is not drawn: no walk can see
it (``test_walk_proof`` shows what still holds then). Staff may make a key again right
after deleting the product skuferry linked to it: the 404 on its id tells skuferry
when, and a walk ``list_lag_s`` later shows the new one. A key skuferry never linked
they make long enough before a run for the list to show it: nothing tells any client
that a product was made within the list's lag before its walk (``staff_create``).

After every step: no key is ever on the remote twice, no POST went out for a key
whose earlier create was left in doubt (checked by ``tests.faults`` at POST time),
and a create-only value staff wrote is never overwritten. After every run, also
one that crashed: a product whose row is present but unreadable is never
archived, gone or updated (held: its remote product and its mirror row are as
before the run), and while the source holds a row whose product cannot be told
(no readable key, or fields that may be shifted) nothing is archived or gone. After a run in which
nothing went wrong: every valid source product is on the remote once with the
source's owned fields (except staff edits a plain run cannot see), products that
left the source are archived and those back are restored, and a run right after it,
with nothing changed, writes nothing.

What it found is kept below as plain examples, each a bug it found and that is now
fixed. ``SKUFERRY_MACHINE_EXAMPLES=2000`` runs it longer; CI (``CI=true``) runs the
same examples every time, as Hypothesis' own CI profile does, so a red build replays.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from collections import Counter
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from skuferry import errors
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import Settings
from skuferry.models import BadRecord, RunOptions
from skuferry.sync.engine import Adapters, run_once
from tests.fakes import Crash, FakeClock, FakeRemote, ListSource
from tests.faults import (
    PAGE_KINDS,
    FaultKind,
    FaultyRemote,
    Op,
    PageFault,
    WalkFault,
    When,
    WriteFault,
    crash_before_transaction,
    intents_never_reopened,
)

KEYS = ("A", "B", "C", "D")
NAMES = ("Lamp", "Desk", "")  # the remote refuses an empty name (422)
PRICES = ("1.00", "2.50")
BLURBS = ("Soft light", "Oak top")  # a column that may be create-only
COLUMNS = ("sku", "name", "price", "blurb")  # the source's: what skuferry sends on create
OWNED = ("sku", "name", "price")  # what skuferry keeps in step (plus blurb unless create-only)
ARCHIVED, ACTIVE = {"status": "archived"}, {"status": "active"}  # [gone] patch and restore
EXAMPLES = int(os.environ.get("SKUFERRY_MACHINE_EXAMPLES", "100"))
# Writes in flight. A fault hits "the next write", so with several in flight which key
# it hits depends on thread order: Hypothesis can then neither replay nor shrink a
# failure (FlakyStrategyDefinition). One at a time is the default; explore concurrency
# with SKUFERRY_MACHINE_IN_FLIGHT=1,3 and read a failure from its log, not its replay.
IN_FLIGHT = [int(n) for n in os.environ.get("SKUFERRY_MACHINE_IN_FLIGHT", "1").split(",")]

keys = st.sampled_from(KEYS)
names = st.sampled_from(NAMES)
prices = st.sampled_from(PRICES)


OPS: tuple[Op, ...] = ("create", "update")
WHENS: tuple[When, ...] = ("before", "after")
# A 429 is never the answer to a write the server applied.
KINDS: dict[When, tuple[FaultKind, ...]] = {
    "before": ("unknown", "crash", "rate_limited"),
    "after": ("unknown", "crash"),
}


@st.composite
def write_faults(draw: st.DrawFn, among: list[str]) -> WriteFault:
    """The next create or update of a source key (or of any key) goes wrong."""
    when = draw(st.sampled_from(WHENS))
    key = draw(st.none() | st.sampled_from(among or KEYS))
    return WriteFault(key, draw(st.sampled_from(OPS)), when, draw(st.sampled_from(KINDS[when])))


Row = dict[str, str]
MirrorState = tuple[str, str | None, str | None, str | None]  # state, digest, refused, remote id


@dataclass(frozen=True)
class HeldSnapshot:
    """Before a run: each held key's remote products and mirror row; what had left."""

    held: dict[str, tuple[list[dict[str, Any]], MirrorState | None]]
    left: set[str]  # keys the mirror had as gone or archived
    archived: set[str]  # remote ids the remote had archived
    unsure: bool  # the source holds a row that could be any product


def _key_of(row: Row | str | BadRecord) -> str | None:
    if isinstance(row, dict):
        return row["sku"]
    if isinstance(row, BadRecord) and row.fields:
        return str(row.fields["sku"])
    return None


class RunMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="skuferry-machine-"))
        # the source; a str is an unreadable row without a key, a BadRecord one whose
        # fields hold its key (held), shifted or not
        self.rows: list[Row | str | BadRecord] = []
        self.clock = FakeClock(tick=0.001)  # the run's, the mirror's, the list's lag: reads differ
        self.remote = FaultyRemote(state_path=self.dir / "state.db", clock=self.clock)
        self.staff_touched: set[str] = set()  # owned fields changed on the remote by staff
        self.settled = False  # the last run was clean and nothing changed since
        self.settings: Settings | None = None
        self.owned: tuple[str, ...] = COLUMNS
        self.archiving = False
        self.staff_blurbs: dict[str, str] = {}  # remote id -> a create-only value staff wrote

    @initialize(
        method=st.sampled_from(["patch", "put"]),
        in_flight=st.sampled_from(IN_FLIGHT),
        create_only=st.booleans(),
        archiving=st.booleans(),
        lag=st.sampled_from([(0.0, 0.0), (0.0, 10.0), (3.0, 3.0), (3.0, 10.0)]),
    )
    def configure(
        self,
        *,
        method: Literal["patch", "put"],
        in_flight: int,
        create_only: bool,
        archiving: bool,
        lag: tuple[float, float],
    ) -> None:
        """``[mapping]`` with a create-only ``blurb`` or pass-through; ``[gone]`` archiving."""
        mapping: dict[str, Any] = {"key": "sku"}
        if create_only:
            self.owned = OWNED
            fields: dict[str, Any] = {c: c for c in OWNED}
            mapping["fields"] = {**fields, "blurb": {"column": "blurb", "create_only": True}}
        self.archiving = archiving
        self.remote.lag_s, list_lag_s = lag  # the list's lag, and the bound skuferry is told
        gone = {"action": "patch", "patch": ARCHIVED, "restore": ACTIVE} if archiving else {}
        self.settings = settings_from_dict(
            {
                "api": {
                    "base_url": "http://127.0.0.1:9",
                    "api_key": "k-test",
                    "update_method": method,
                    "max_in_flight": in_flight,
                    "page_size": 2,
                    "list_lag_s": list_lag_s,
                },
                "source": {"type": "csv", "path": str(self.dir / "unused.csv")},
                "mapping": mapping,
                "gone": gone,
                "state": {"path": str(self.dir / "state.db")},
            }
        )

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- the source ---------------------------------------------------------------------

    def _source_keys(self) -> list[str]:
        return sorted({r["sku"] for r in self.rows if isinstance(r, dict)})

    def _held(self) -> set[str]:
        """Keys with an unreadable row: their products keep their last state."""
        return {str(r.fields["sku"]) for r in self.rows if isinstance(r, BadRecord) and r.fields}

    def _unsure(self) -> bool:
        """The source holds a row that could be any product: nothing may be decided gone."""
        return any(
            isinstance(r, str) or (isinstance(r, BadRecord) and r.guessed) for r in self.rows
        )

    def _changed(self) -> None:
        self.settled = False

    @rule(key=keys, name=names, price=prices, blurb=st.sampled_from(BLURBS))
    def put_row(self, key: str, name: str, price: str, blurb: str) -> None:
        """Add a product, or edit one (its repeats go with it)."""
        self.rows = [r for r in self.rows if not (isinstance(r, dict) and r["sku"] == key)]
        self.rows.append({"sku": key, "name": name, "price": price, "blurb": blurb})
        self._changed()

    @precondition(lambda self: self._source_keys() or self._held())
    @rule(data=st.data())
    def remove_key(self, data: st.DataObject) -> None:
        """A product leaves the source: its rows, readable or not."""
        key = data.draw(st.sampled_from(sorted(set(self._source_keys()) | self._held())))
        self.rows = [r for r in self.rows if _key_of(r) != key]
        self._changed()

    @precondition(lambda self: self._source_keys())
    @rule(data=st.data(), conflicting=st.booleans())
    def repeat_row(self, data: st.DataObject, conflicting: bool) -> None:
        """A key repeated further down: the same row, or one that contradicts it."""
        key = data.draw(st.sampled_from(self._source_keys()))
        first = next(r for r in self.rows if isinstance(r, dict) and r["sku"] == key)
        price = "9.99" if conflicting else first["price"]
        self.rows.append({**first, "price": price})
        self._changed()

    @rule()
    def unreadable_row(self) -> None:
        """A row without a readable key: which product it is cannot be told."""
        self.rows.append("unreadable row")
        self._changed()

    @rule(key=keys, shifted=st.booleans(), drop_valid=st.booleans())
    def unreadable_row_of(self, key: str, shifted: bool, drop_valid: bool) -> None:
        """A product's row turns unreadable (a bad byte; with ``shifted``, a field too many:
        the key read by position is held, but the row could be another product)."""
        if drop_valid:  # the bad row replaces the product's row, as in a broken export
            self.rows = [r for r in self.rows if not (isinstance(r, dict) and r["sku"] == key)]
        fields = {"sku": key, "name": "L\udce9mp", "price": "1.00", "blurb": BLURBS[0]}
        reason = "4 fields, the header has 3" if shifted else "column 'name': invalid utf-8"
        self.rows.append(BadRecord(0, reason, fields=fields, guessed=shifted))
        self._changed()

    @precondition(lambda self: any(not isinstance(r, dict) for r in self.rows))
    @rule()
    def fix_export(self) -> None:
        """The export is put right: every unreadable row is gone from it."""
        self.rows = [r for r in self.rows if isinstance(r, dict)]
        self._changed()

    # -- staff on the remote ------------------------------------------------------------

    @precondition(lambda self: self.remote.products)
    @rule(data=st.data(), column=st.sampled_from(["name", "price", "blurb", "note"]))
    def staff_edit(self, data: st.DataObject, column: str) -> None:
        rid = data.draw(st.sampled_from(sorted(self.remote.products)))
        product = self.remote.products[rid]
        product[column] = f"staff {product.get(column, '')}"
        if column in self.owned:
            self.staff_touched.add(str(product["sku"]))
        elif column == "blurb":
            self.staff_blurbs[rid] = product[column]
        self._changed()

    @precondition(lambda self: self.remote.products)
    @rule(data=st.data())
    def staff_delete(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.remote.products)))
        self.staff_touched.add(str(self.remote.products.pop(rid)["sku"]))
        self._changed()

    @rule(key=keys, name=st.sampled_from(NAMES[:-1]), price=prices)
    def staff_create(self, key: str, name: str, price: str) -> None:
        """Staff add a product of a key the remote lacks, where skuferry looks before a POST.

        Not after a walk for a key the mirror has no remote id for: the planner then takes
        the key as absent and POSTs without looking (by design, a walk per create would
        cost 1 read per 100 products each run), so that duplicate is staff's, not a bug.

        Before the first walk, a key skuferry never linked is made long enough before the
        run for a lagging list to show it: a walk proves absent only what was made
        ``lag`` before it began, and nothing tells skuferry that this key was just made,
        so no client could avoid that duplicate (it would have to wait ``lag`` after every
        walk, and a product made meanwhile would race it again). A key skuferry linked is
        made again at once: the 404 on its id tells skuferry when, and a walk
        ``list_lag_s`` later shows it.
        """
        if self.remote.by_key(key):
            return
        linked = self._linked(key)
        if self._walked() and not linked:
            return
        self.remote.seed({"sku": key, "name": name, "price": price}, listed=not linked)
        self.staff_touched.add(key)
        self._changed()

    def _state(self, sql: str, *args: str) -> list[tuple[Any, ...]]:
        path = self.dir / "state.db"
        if not path.exists():
            return []
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            return db.execute(sql, args).fetchall()

    def _walked(self) -> bool:
        return bool(self._state("SELECT 1 FROM meta WHERE name = 'walked_at'"))

    def _linked(self, key: str) -> bool:
        """The mirror holds a remote id for ``key`` (a 404 on it makes skuferry look)."""
        sql = "SELECT 1 FROM products WHERE key = ? AND remote_id IS NOT NULL"
        return bool(self._state(sql, key))

    # -- runs -----------------------------------------------------------------------------

    @rule(verify=st.booleans(), allow_empty=st.booleans())
    def clean_run(self, verify: bool, allow_empty: bool) -> None:
        self._run(verify=verify, allow_empty=allow_empty)

    @rule(
        data=st.data(),
        verify=st.booleans(),
        crash_at=st.none() | st.integers(1, 24),
        walk=st.none() | st.builds(WalkFault, page=st.integers(1, 3), crash=st.booleans()),
        pages=st.lists(
            st.builds(
                PageFault,
                page=st.integers(1, 3),
                kind=st.sampled_from([k for k in PAGE_KINDS if k != "shifted"]),
            ),
            max_size=3,
        ),
        allow_empty=st.booleans(),
        gap=st.sampled_from([0.0, 60.0]),
    )
    def faulty_run(
        self,
        *,
        data: st.DataObject,
        verify: bool,
        crash_at: int | None,
        walk: WalkFault | None,
        pages: list[PageFault],
        allow_empty: bool,
        gap: float,
    ) -> None:
        """One run with faults armed; a fault may not fire (no such write, no walk). Each
        page fault hits one read of its page: two of one page outlast the walk's retry.
        ``gap``: the run starts right after the last one, or a schedule's minute later."""
        among = self._source_keys()
        self.remote.faults = data.draw(st.lists(write_faults(among), max_size=3), label="faults")
        self.remote.walk_fault = walk
        self.remote.page_faults = list(pages)
        self._run(verify=verify, allow_empty=allow_empty, crash_at=crash_at, gap=gap)

    def _run(
        self, *, verify: bool, allow_empty: bool, crash_at: int | None = None, gap: float = 60.0
    ) -> None:
        assert self.settings is not None
        self.clock.now += gap  # time between runs: the list catches up with earlier writes
        settled, writes_before = self.settled, self.remote.requests["write"]
        in_doubt = {key for (key,) in self._state("SELECT key FROM intents")}
        relinked_before = self._relinked()
        held_before = self._held_snapshot()
        # Staff deleted them all, or the list does not show yet what is left (its lag):
        # the first walk finds none.
        listed_none = not self.remote.listed()
        fired: list[str] = []
        failure: BaseException | None = None
        try:
            with crash_before_transaction(crash_at, fired), intents_never_reopened():
                summary = run_once(
                    self.settings,
                    RunOptions(verify=verify, allow_empty_source=allow_empty),
                    adapters=Adapters(
                        source=ListSource(list(self.rows)), client=self.remote, clock=self.clock
                    ),
                )
        except (Crash, errors.ApiError, errors.EmptySourceRefused) as exc:
            failure = exc
        fired += self.remote.disarm()
        self._assert_held(held_before)  # whatever happened in the run, a crash too
        for what in fired:
            event(f"fired: {what.split(' p')[0].rsplit(' ', 1)[0]}")  # minus the key, the page
        event(f"run ended by {type(failure).__name__}" if failure else "run completed")
        if failure is not None:
            self._explain(failure, fired, allow_empty=allow_empty, listed_none=listed_none)
            self.settled = False
            return
        if fired:
            self.settled = False
            return
        # Nothing went wrong in this run: the remote matches the source.
        assert summary.failed == 0, summary.problems
        if settled:
            assert self.remote.requests["write"] == writes_before, "a no-op run wrote"
        self.staff_touched -= self.remote.written
        if verify:  # put right, except what the source cannot send (refused, contradictory)
            self.staff_touched -= {k for k, r in self._valid_rows().items() if r["name"]}
        # A walk of this run linked a product staff made again after a 404 (see below).
        late = self._assert_in_step(in_doubt | (self._relinked() - relinked_before))
        # Else the next run still has work to do: --verify repairs, a late archive.
        self.settled = not self.staff_touched and not late

    def _held_snapshot(self) -> HeldSnapshot:
        """What a run must not change: held products, and with an unsure row any gone move."""
        sql = "SELECT key, state, digest, rejected_digest, remote_id FROM products"
        mirror = {
            key: (state, digest, rejected, rid)
            for key, state, digest, rejected, rid in self._state(sql)
        }
        held = {
            key: ([dict(p) for p in self.remote.by_key(key)], mirror.get(key))
            for key in self._held()
        }
        left = {k for k, (state, *_) in mirror.items() if state in ("gone", "archived")}
        archived = {rid for rid, p in self.remote.products.items() if p.get("status") == "archived"}
        return HeldSnapshot(held, left, archived, unsure=self._unsure())

    def _assert_held(self, before: HeldSnapshot) -> None:
        """A product whose row is present but unreadable is never archived, gone or updated."""
        sql = "SELECT key, state, digest, rejected_digest, remote_id FROM products"
        mirror = {
            key: (state, digest, rejected, rid)
            for key, state, digest, rejected, rid in self._state(sql)
        }
        for key, (remote, row) in before.held.items():
            now = [dict(p) for p in self.remote.by_key(key)]
            assert now == remote, f"held {key} changed on the remote: {remote} -> {now}"
            after = mirror.get(key)
            if row is None:  # unknown: a walk may find it on the remote (remote only)
                assert after is None or after[0] == "remote_only", f"held {key}: {after}"
            elif row[3] is None:  # no remote id: a walk may link the one it finds
                assert after is not None and after[0] == row[0], f"held {key}: {row} -> {after}"
            else:
                assert after == row, f"held {key} changed in the mirror: {row} -> {after}"
        if before.unsure:
            left = {k for k, (state, *_) in mirror.items() if state in ("gone", "archived")}
            assert left <= before.left, (
                f"gone with an unsure row in the source: {left - before.left}"
            )
            archived = {
                rid for rid, p in self.remote.products.items() if p.get("status") == "archived"
            }
            assert archived <= before.archived, "archived with an unsure row in the source"

    def _relinked(self) -> set[str]:
        """PENDING keys a walk linked to a product it found (archived by the next run)."""
        sql = "SELECT key FROM products WHERE state = 'pending' AND remote_id IS NOT NULL"
        return {key for (key,) in self._state(sql)}

    def _explain(
        self, failure: BaseException, fired: list[str], *, allow_empty: bool, listed_none: bool
    ) -> None:
        """A run may only end early for a reason the test gave it."""
        if isinstance(failure, Crash):
            assert any("crash" in f for f in fired), failure
        elif isinstance(failure, errors.EmptySourceRefused):
            assert not allow_empty and not self._valid_rows(), failure
        elif any(f.startswith("page ") for f in fired) and "not complete" in str(failure):
            pass  # a walk still inconsistent when read again: exit 3, creates held
        elif listed_none and "answered no product while the state knows" in str(failure):
            pass  # an empty list proves no absence (an index being rebuilt): exit 3
        else:
            assert any("walk" in f for f in fired), failure

    def _valid_rows(self) -> dict[str, Row]:
        """Keys whose rows all agree (repeats of one row are fine): the row."""
        by_key: dict[str, list[Row]] = {}
        for r in self.rows:
            if isinstance(r, dict):
                by_key.setdefault(r["sku"], []).append(r)
        held = self._held()  # rejected: whatever the remote held before stays
        return {
            k: rs[0] for k, rs in by_key.items() if k not in held and all(r == rs[0] for r in rs)
        }

    def _assert_in_step(self, in_doubt: set[str]) -> set[str]:
        """Returns the keys archived only by the next run (see ``_assert_archived``)."""
        for key, row in self._valid_rows().items():
            held = self.remote.by_key(key)
            if not row["name"]:
                continue  # refused by the API: whatever the remote held before stays
            if key in self.staff_touched:
                assert len(held) <= 1
                continue  # a plain run does not look at the remote: only --verify repairs
            assert len(held) == 1, f"{key} is on the remote {len(held)} times"
            got = {f: held[0].get(f) for f in self.owned}
            assert got == {f: row[f] for f in self.owned}, f"{key}: remote {got} != source {row}"
            assert held[0].get("status") != "archived", f"{key} is back but still archived"
        return self._assert_archived(in_doubt) if self.archiving else set()

    def _assert_archived(self, in_doubt: set[str]) -> set[str]:
        """Every product skuferry made or linked whose key left the source is archived.

        Except a lost create the run found on the remote (its intent was open), or a
        product staff made again after its archive answered 404: it is linked by the
        walk, and archived by the next run (``plan.leaving``).
        """
        if self._unsure():
            return set()  # nothing decided gone: checked by _assert_held
        linked = self._state(
            "SELECT remote_id, key FROM products WHERE remote_id IS NOT NULL "
            "AND state != 'remote_only'"
        )
        in_source, late = set(self._source_keys()) | self._held(), set()
        for rid, key in linked:
            product = self.remote.products.get(rid)
            if key in in_source or product is None or product.get("status") == "archived":
                continue
            assert key in in_doubt, f"{key} left the source but is not archived"
            late.add(key)
        return late

    # -- after every step ---------------------------------------------------------------

    @invariant()
    def no_key_twice_on_the_remote(self) -> None:
        twice = [k for k, n in Counter(self.remote.keys()).items() if n > 1]
        assert not twice, f"on the remote more than once: {twice}"

    @invariant()
    def create_only_edits_survive(self) -> None:
        for rid, blurb in self.staff_blurbs.items():
            if rid in self.remote.products:
                assert self.remote.products[rid].get("blurb") == blurb, f"{rid}: blurb overwritten"

    @invariant()
    def no_blind_post(self) -> None:
        assert not self.remote.violations, self.remote.violations

    @invariant()
    def the_history_is_committed_with_the_journal(self) -> None:
        """A create's history row is open exactly while its intent is (one transaction),
        whatever broke the run, and a key has at most one open row."""
        if not self._state("SELECT 1 FROM sqlite_master WHERE name = 'history'"):
            return
        intents = {k for (k,) in self._state("SELECT key FROM intents")}
        sql = "SELECT key, kind FROM history WHERE outcome = 'sent'"
        open_rows = self._state(sql)
        assert {k for k, kind in open_rows if kind == "create"} == intents
        assert len({k for k, _ in open_rows}) == len(open_rows), open_rows


RunMachine.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=50,
    deadline=None,
    derandomize=os.environ.get("CI") == "true",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestRunMachine = RunMachine.TestCase


# -- what the machine found, as plain examples -----------------------------------------


def _settings(tmp_path: Path, **over: Any) -> Settings:
    api = {"base_url": "http://127.0.0.1:9", "api_key": "k-test", "max_in_flight": 1}
    return settings_from_dict(
        {
            **over,
            "api": {**api, "list_lag_s": 0},  # the fake's list shows every write at once
            "source": {"type": "csv", "path": str(tmp_path / "unused.csv")},
            "mapping": {"key": "sku"},
            "state": {"path": str(tmp_path / "state.db")},
        }
    )


def _sync(settings: Settings, remote: FakeRemote, rows: list[Row], *, verify: bool) -> None:
    options = RunOptions(verify=verify)
    run_once(settings, options, adapters=Adapters(source=ListSource(list(rows)), client=remote))


def _owned(remote: FakeRemote, key: str) -> list[dict[str, Any]]:
    return [{f: p.get(f) for f in OWNED} for p in remote.by_key(key)]


def _edit_on_the_cms(remote: FakeRemote, key: str) -> None:
    remote.products[remote.by_key(key)[0]["id"]]["name"] = "edited on the CMS"


LAMP = {"sku": "A", "name": "Lamp", "price": "1.00"}
DESK = {"sku": "B", "name": "Desk", "price": "1.00"}


def test_verify_puts_right_a_product_edited_while_it_was_out_of_the_source(tmp_path: Path) -> None:
    settings, remote = _settings(tmp_path), FakeRemote()
    _sync(settings, remote, [LAMP, DESK], verify=False)
    _edit_on_the_cms(remote, "A")
    _sync(settings, remote, [DESK], verify=False)  # A leaves the source: gone
    _sync(settings, remote, [LAMP, DESK], verify=True)  # back unchanged: planned UNCHANGED
    assert _owned(remote, "A") == [LAMP]


def test_verify_puts_right_an_edited_field_when_the_source_changed_another(
    tmp_path: Path,
) -> None:
    settings, remote = _settings(tmp_path), FakeRemote()
    _sync(settings, remote, [LAMP], verify=False)
    _edit_on_the_cms(remote, "A")
    changed = {**LAMP, "price": "2.50"}
    _sync(settings, remote, [changed], verify=True)  # a PATCH of the price alone kept the edit
    assert _owned(remote, "A") == [changed]


def test_verify_finds_a_deleted_product_whose_update_has_nothing_new_to_send(
    tmp_path: Path,
) -> None:
    settings, remote = _settings(tmp_path), FakeRemote()
    _sync(settings, remote, [LAMP], verify=False)
    del remote.products[remote.by_key("A")[0]["id"]]  # deleted on the CMS
    _sync(settings, remote, [{**LAMP, "name": ""}], verify=False)  # refused: 422
    # Back to what was last sent: the update has nothing to send, so no request met the 404.
    _sync(settings, remote, [LAMP], verify=True)
    assert _owned(remote, "A") == [LAMP]


def test_a_source_of_returning_archived_products_is_not_refused_as_empty(
    tmp_path: Path,
) -> None:
    gone = {"action": "patch", "patch": ARCHIVED, "restore": ACTIVE}
    settings, remote = _settings(tmp_path, gone=gone), FakeRemote()
    _sync(settings, remote, [LAMP, DESK], verify=False)
    _sync(settings, remote, [DESK], verify=False)  # A archived
    _sync(settings, remote, [LAMP], verify=False)  # A restored, B archived: not "empty"
    assert remote.by_key("A")[0]["status"] == "active"
    assert remote.by_key("B")[0]["status"] == "archived"


def test_a_verify_run_cut_short_before_its_repair_leaves_the_repair_planned(
    tmp_path: Path,
) -> None:
    settings, remote = _settings(tmp_path), FakeRemote()
    _sync(settings, remote, [LAMP], verify=False)
    _edit_on_the_cms(remote, "A")

    def die(op: str, payload: dict[str, Any]) -> None:
        raise Crash(f"killed before the {op} reached the server")

    remote.pre = die
    with pytest.raises(Crash):
        _sync(settings, remote, [LAMP], verify=True)  # found the edit, died before the PATCH
    remote.pre = None
    _sync(settings, remote, [LAMP], verify=False)  # "last sent" now holds the edit: update
    assert _owned(remote, "A") == [LAMP]


# -- found by the machine in issue 11's [gone] archiving, fixed -------------------------

GONE = {"action": "patch", "patch": ARCHIVED, "restore": ACTIVE}


def test_a_refused_restore_is_not_resent_unchanged(tmp_path: Path) -> None:
    settings, remote = _settings(tmp_path, gone=GONE), FakeRemote()
    _sync(settings, remote, [LAMP, DESK], verify=False)
    _sync(settings, remote, [DESK], verify=False)  # A archived
    back = [{**LAMP, "name": ""}, DESK]
    _sync(settings, remote, back, verify=False)  # the restore is refused: 422
    writes = remote.requests["write"]
    _sync(settings, remote, back, verify=False)  # nothing changed
    assert remote.requests["write"] == writes, "the refused restore went out again"
    assert remote.by_key("A")[0]["status"] == "archived"
    _sync(settings, remote, [LAMP, DESK], verify=False)  # the data changed: restored
    assert _owned(remote, "A") == [LAMP]
    assert remote.by_key("A")[0]["status"] == "active"


def test_a_product_recreated_after_its_archive_404d_is_adopted_not_duplicated(
    tmp_path: Path,
) -> None:
    settings, remote = _settings(tmp_path, gone=GONE), FakeRemote()
    _sync(settings, remote, [LAMP, DESK], verify=False)
    del remote.products[remote.by_key("A")[0]["id"]]  # deleted on the CMS ...
    remote.seed(dict(LAMP))  # ... and made again there, under another id
    _sync(settings, remote, [DESK], verify=False)  # A left: its archive PATCH answers 404
    _sync(settings, remote, [LAMP, DESK], verify=False)  # A is back
    assert len(remote.by_key("A")) == 1


def test_verify_puts_right_an_edit_of_a_product_restored_in_the_same_run(tmp_path: Path) -> None:
    settings, remote = _settings(tmp_path, gone=GONE), FakeRemote()
    _sync(settings, remote, [LAMP, DESK], verify=False)
    _sync(settings, remote, [DESK], verify=False)  # A archived
    _edit_on_the_cms(remote, "A")
    _sync(settings, remote, [LAMP, DESK], verify=True)  # the restore carried the status alone
    assert _owned(remote, "A") == [LAMP]
    assert remote.by_key("A")[0]["status"] == "active"


def test_an_archive_whose_answer_was_lost_is_restored_when_the_product_is_back(
    tmp_path: Path,
) -> None:
    settings, remote = _settings(tmp_path, gone=GONE), FakeRemote()
    _sync(settings, remote, [LAMP, DESK], verify=False)

    def lose_answer(op: str, payload: dict[str, Any]) -> None:
        raise errors.OutcomeUnknown(f"{op}: read timeout after the server applied it")

    remote.post = lose_answer
    _sync(settings, remote, [DESK], verify=False)  # A's archive PATCH landed, answer lost
    remote.post = None
    assert remote.by_key("A")[0]["status"] == "archived"
    _sync(settings, remote, [LAMP, DESK], verify=False)  # A is back: "maybe archived", restored
    assert remote.by_key("A")[0]["status"] == "active"


def test_an_archive_whose_answer_was_lost_is_sent_again_while_the_product_stays_away(
    tmp_path: Path,
) -> None:
    settings, remote = _settings(tmp_path, gone=GONE), FakeRemote()
    _sync(settings, remote, [LAMP, DESK], verify=False)

    def time_out(op: str, payload: dict[str, Any]) -> None:
        raise errors.OutcomeUnknown(f"{op}: timed out before the server applied it")

    remote.pre = time_out
    _sync(settings, remote, [DESK], verify=False)  # A's archive PATCH never landed
    remote.pre = None
    assert remote.by_key("A")[0].get("status") != "archived"
    _sync(settings, remote, [DESK], verify=False)  # "maybe archived": sent again
    assert remote.by_key("A")[0]["status"] == "archived"
    writes = remote.requests["write"]
    _sync(settings, remote, [DESK], verify=False)  # archived for sure: not again
    assert remote.requests["write"] == writes


# Found by the machine with SKUFERRY_MACHINE_EXAMPLES=300 (issue 18): a restore's journal
# left the row ARCHIVED "for sure", so a product restored just before a crash was live on
# the CMS and never archived again. The journal now marks the archive in doubt.


def test_a_restore_cut_short_by_a_crash_is_archived_again_when_the_product_leaves(
    tmp_path: Path,
) -> None:
    settings, remote = _settings(tmp_path, gone=GONE), FakeRemote()
    _sync(settings, remote, [LAMP, DESK], verify=False)
    _sync(settings, remote, [DESK], verify=False)  # A archived

    def die(op: str, payload: dict[str, Any]) -> None:
        raise Crash(f"killed after the server applied the {op}")

    remote.post = die
    with pytest.raises(Crash):
        _sync(settings, remote, [{**LAMP, "price": "2.50"}, DESK], verify=False)  # restored
    remote.post = None
    assert remote.by_key("A")[0]["status"] == "active"
    _sync(settings, remote, [DESK], verify=False)  # A leaves again
    assert remote.by_key("A")[0]["status"] == "archived"
    writes = remote.requests["write"]
    _sync(settings, remote, [DESK], verify=False)  # archived for sure now: not again
    assert remote.requests["write"] == writes


# -- found by the machine with SKUFERRY_MACHINE_EXAMPLES=1500 after group commit, fixed --
#
# A list that lags 3 s behind writes, and skuferry told so ([api] list_lag_s = 3); a fake
# clock: a run waiting for the list costs no time.
#
# 1. (there before this round) A product deleted on the CMS and made again there by staff
#    just before a run: its id answered 404 and the walk, too early to show the new one,
#    was taken as proof of absence: POSTed, on the CMS twice. A 404 now starts the doubt
#    clock as a lost create does: the key is created only from a walk the list could show
#    it in (list_lag_s after the 404, or a later create of the run already listed), also
#    by the next run when a kill cut this one short.
# 2. (group commit, b4d4499) An intent a killed run left is lost as of the next run's start;
#    that run's own create was a witness to come, and the second look's six walks, guessing
#    at its lag in doubling steps from 50 ms, ended short of list_lag_s: failed "outcome
#    unknown" after a clean run. The last walk now waits out the bound.


def _lagging(tmp_path: Path, lag_s: float = 3.0) -> tuple[Settings, FaultyRemote, FakeClock]:
    clock = FakeClock(tick=0.001)
    remote = FaultyRemote(state_path=tmp_path / "state.db", clock=clock, lag_s=lag_s)
    settings = settings_from_dict(
        {
            "api": {
                "base_url": "http://127.0.0.1:9",
                "api_key": "k-test",
                "max_in_flight": 1,
                "page_size": 2,
                "list_lag_s": lag_s,
            },
            "source": {"type": "csv", "path": str(tmp_path / "unused.csv")},
            "mapping": {"key": "sku"},
            "state": {"path": str(tmp_path / "state.db")},
        }
    )
    return settings, remote, clock


def _lagging_run(
    settings: Settings,
    remote: FaultyRemote,
    clock: FakeClock,
    rows: list[Row],
    *,
    verify: bool = False,
    gap: float = 60.0,
) -> Any:
    clock.now += gap
    with intents_never_reopened():
        return run_once(
            settings,
            RunOptions(verify=verify),
            adapters=Adapters(source=ListSource(list(rows)), client=remote, clock=clock),
        )


def _staff_make_again(remote: FaultyRemote, row: Row) -> None:
    """Staff delete the product of ``row``'s key on the CMS and make it again at once: the
    list shows the new one only ``lag_s`` later."""
    del remote.products[remote.by_key(row["sku"])[0]["id"]]
    remote.seed(dict(row))


@pytest.mark.parametrize("verify", [True, False])
def test_a_product_staff_made_again_within_the_lists_lag_is_not_created_twice(
    tmp_path: Path, verify: bool
) -> None:
    # --verify reads the id before any write (404); a plain run's update meets the 404.
    settings, remote, clock = _lagging(tmp_path)
    _lagging_run(settings, remote, clock, [LAMP])
    _staff_make_again(remote, LAMP)
    row = LAMP if verify else {**LAMP, "price": "2.50"}
    summary = _lagging_run(settings, remote, clock, [row], verify=verify, gap=0.0)
    assert len(remote.by_key("A")) == 1, "the 404 was taken for absence before the list caught up"
    assert summary.failed == 0, summary.problems
    assert _owned(remote, "A") == [row]


def test_a_404_a_killed_run_met_is_looked_up_once_the_list_could_show_a_product_made_again(
    tmp_path: Path,
) -> None:
    settings, remote, clock = _lagging(tmp_path)
    _lagging_run(settings, remote, clock, [LAMP, DESK])
    _staff_make_again(remote, LAMP)
    # A's PATCH answers 404 (before the fault's hook), B's lands and the run is killed
    remote.faults = [WriteFault(None, "update", "after", "crash")]
    changed = [{**LAMP, "price": "2.50"}, {**DESK, "price": "2.50"}]
    with pytest.raises(Crash):
        _lagging_run(settings, remote, clock, changed, gap=0.0)
    remote.disarm()
    summary = _lagging_run(settings, remote, clock, changed, gap=0.0)
    assert len(remote.by_key("A")) == 1, "the 404 was taken for absence before the list caught up"
    assert summary.failed == 0, summary.problems


def test_a_create_a_killed_run_left_in_doubt_is_settled_by_the_next_run(tmp_path: Path) -> None:
    # The next run takes the intent as lost from its own start (when the killed run died is
    # not known), and its own create (C) is the witness it waits for: it waited for the
    # witness in doubling steps and gave up after six walks, short of list_lag_s.
    settings, remote, clock = _lagging(tmp_path)
    remote.faults = [WriteFault("D", "create", "before", "crash")]  # killed before it landed
    with pytest.raises(Crash):
        _lagging_run(settings, remote, clock, [{**DESK, "sku": "D"}])
    remote.disarm()
    rows = [{**DESK, "sku": "D"}, {**LAMP, "sku": "C"}]
    summary = _lagging_run(settings, remote, clock, rows)
    assert summary.failed == 0, summary.problems
    assert remote.keys() == ["C", "D"]


def test_a_create_that_never_went_out_leaves_nothing_to_wait_for(tmp_path: Path) -> None:
    # A 401 leaves the row PENDING without an id, as a 404 does; but nothing of it can be on
    # the CMS, so the next run creates it without waiting for the list.
    settings, remote, clock = _lagging(tmp_path)
    _lagging_run(settings, remote, clock, [DESK])
    faults = remote.pre

    def revoked(op: str, payload: dict[str, Any]) -> None:
        raise errors.AuthError(401, "UNAUTHORIZED", "invalid API key")

    remote.pre = revoked
    with pytest.raises(errors.AuthError):
        _lagging_run(settings, remote, clock, [DESK, LAMP])
    remote.pre = faults
    summary = _lagging_run(settings, remote, clock, [DESK, LAMP], gap=0.0)
    assert (summary.created, summary.failed) == (1, 0)
    assert clock.waits == [], "waited for the list to show a product never sent"
