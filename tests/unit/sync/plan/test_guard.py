"""The one ratio guard of [safety], as the change guard and the gone guard use it."""

from __future__ import annotations

import pytest

from skuferry.errors import ChangeGuardTripped, GoneGuardTripped, ReplacementRefused
from skuferry.sync.plan.guard import ratio_guard, replacement_guard
from skuferry.sync.write.gone import guard as gone_guard


def change_guard(updates: int, known: int, *, force: bool = False) -> None:
    ratio_guard(
        updates,
        known,
        max_ratio=0.5,
        minimum=10,
        force=force,
        error=ChangeGuardTripped,
        what="would be updated",
        key="max_change_ratio",
        advice="Check the export, then run again with --force if the change is real.",
    )


def test_above_the_ratio_it_stops_the_run_naming_counts_share_key_and_way_out() -> None:
    with pytest.raises(ChangeGuardTripped) as caught:
        change_guard(61, 100)
    assert str(caught.value) == (
        "61 of 100 known products (61%) would be updated, more than [safety] "
        "max_change_ratio = 0.5: nothing was written. "
        "Check the export, then run again with --force if the change is real."
    )


@pytest.mark.parametrize(
    ("count", "known", "force"),
    [
        (50, 100, False),  # exactly the ratio: allowed
        (10, 11, False),  # the minimum never trips, whatever the share
        (0, 0, False),  # an empty mirror
        (100, 100, True),  # --force
    ],
)
def test_it_lets_the_run_go(count: int, known: int, force: bool) -> None:
    change_guard(count, known, force=force)


def test_the_gone_guard_is_the_same_rule_with_its_own_words() -> None:
    gone_guard(10, 10, max_ratio=0.1, force=False, archiving=True)  # the minimum
    with pytest.raises(GoneGuardTripped) as caught:
        gone_guard(11, 100, max_ratio=0.1, force=False, archiving=True)
    assert str(caught.value) == (
        "11 of 100 known products (11%) left the source and would be archived, more than "
        "[safety] max_gone_ratio = 0.1: nothing was written. "
        "Check the export, then run again with --force if they are really discontinued."
    )
    with pytest.raises(GoneGuardTripped, match="would be marked gone, more than"):
        gone_guard(11, 100, max_ratio=0.1, force=False, archiving=False)  # [gone] leave


@pytest.mark.parametrize(
    ("leaving", "creating", "known", "refused"),
    [
        (300, 300, 300, True),  # the whole catalog under new keys
        (160, 200, 300, True),  # most of it gone, as many new
        (150, 150, 300, False),  # half: not most
        (200, 100, 300, False),  # fewer new than gone: a shrinking catalog
        (10, 10, 10, False),  # a handful never trips it
    ],
)
def test_a_replacement_of_the_catalog_is_refused_unless_forced(
    leaving: int, creating: int, known: int, refused: bool
) -> None:
    if refused:
        with pytest.raises(ReplacementRefused, match=f"{leaving} of {known} known products"):
            replacement_guard(leaving, creating, known, force=False)
    else:
        replacement_guard(leaving, creating, known, force=False)
    replacement_guard(leaving, creating, known, force=True)
