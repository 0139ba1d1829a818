"""A create in doubt is proven absent only once the list could show it (sync/write/doubt.py)."""

from __future__ import annotations

import pytest

from skuferry.completeness import Reader, Verdict
from skuferry.sync.write.doubt import Doubts
from skuferry.sync.write.walks import WHERE, Walked


def walked(started: float, *, complete: bool = True) -> Walked:
    verdict = Verdict(Reader.WALK, WHERE, complete=complete, reason="" if complete else "hole")
    return Walked(verdict, started, 1)


def doubts(bound_s: float = 10.0) -> Doubts:
    """Creates at t=100 (known, p1), lost at t=101 (key L), and t=102 (known, p2)."""
    d = Doubts(bound_s=bound_s)
    d.created("p1", sent=100.0, answered=100.2)
    d.in_doubt("L", lost=101.0)
    d.created("p2", sent=102.0, answered=102.3)
    return d


def test_a_later_create_on_the_list_before_the_walk_is_a_witness() -> None:
    d = doubts()
    d.watch("p2", 104.0)  # listed 1.7 s after its answer
    assert d.proven_absent("L", walked(104.5))
    assert d.lag_s() == pytest.approx(1.7)


def test_a_witness_seen_during_the_walk_itself_does_not_count() -> None:
    # The page that would hold L may have been read before the page that showed p2.
    d = doubts()
    d.watch("p2", 104.0)
    assert not d.proven_absent("L", walked(103.5))
    assert d.wait_s(["L"], now=104.2) == 0.0, "walk again at once: the witness is there"


def test_an_earlier_create_is_no_witness() -> None:
    d = doubts()
    d.watch("p1", 101.5)
    assert not d.proven_absent("L", walked(102.0))


def test_without_a_witness_the_bound_must_pass() -> None:
    d = doubts(bound_s=5.0)
    assert not d.proven_absent("L", walked(105.9))
    assert d.proven_absent("L", walked(106.0))


def test_a_list_seen_lagging_longer_than_the_bound_proves_nothing_by_time() -> None:
    d = doubts(bound_s=1.0)
    d.after(walked(104.0))  # p1 answered 3.8 s before, still not listed
    assert "lags more than [api] list_lag_s = 1" in d.broken
    assert not d.proven_absent("L", walked(200.0))
    d.watch("p2", 201.0)
    assert d.proven_absent("L", walked(202.0)), "a witness still proves it"


def test_an_incomplete_walk_proves_nothing() -> None:
    d = doubts(bound_s=0.0)
    d.watch("p2", 104.0)
    assert not d.proven_absent("L", walked(105.0, complete=False))
    assert not d.proven_absent("not in doubt", walked(105.0, complete=False))
    assert d.proven_absent("not in doubt", walked(105.0))


def test_a_bound_of_zero_says_the_list_shows_writes_at_once() -> None:
    assert doubts(bound_s=0.0).proven_absent("L", walked(101.0))


def test_the_wait_follows_the_measured_lag_and_stops_at_the_bound() -> None:
    d = doubts(bound_s=10.0)
    d.created("p0", sent=90.0, answered=90.0)
    d.watch("p0", 92.0)  # the list showed p0 2 s after its answer
    # p2 (answered 102.3) is the witness to come: due 2 s after its answer
    assert d.wait_s(["L"], now=103.0) == pytest.approx(102.3 + 2.0 - 103.0)
    lone = Doubts(bound_s=10.0)
    lone.in_doubt("L", lost=101.0)
    assert lone.wait_s(["L"], now=103.0) == 8.0, "no witness to come: wait out the bound"
    lone.broken = "seen lagging longer"
    assert lone.wait_s(["L"], now=103.0) is None, "nothing to wait for in this run"


def test_the_last_walk_waits_out_the_bound_rather_than_guess_at_a_witness() -> None:
    # p2, sent after L was lost, is a witness to come whose lag no walk measured yet: the
    # guess doubles from 50 ms, and six walks of such guesses end short of the bound.
    d = doubts(bound_s=10.0)
    assert d.wait_s(["L"], now=103.0) == pytest.approx(0.05)
    assert d.wait_s(["L"], now=103.0, last=True) == pytest.approx(8.0)
    d.broken = "seen lagging longer"  # no bound to wait for: the witness is all there is
    assert d.wait_s(["L"], now=103.0, last=True) == pytest.approx(0.05)
