"""The ratio guard of ``[safety]``: one rule for the change guard and the gone guard.

A run that would update (``max_change_ratio``) or archive (``max_gone_ratio``) more
than that share of the products the mirror knows is refused before anything is
written (a truncated export, a renamed column), unless ``--force`` says the change is
real. A handful of products (``minimum``) never trips it: on a small catalog any
ordinary day's change would be a large share.
"""

from __future__ import annotations

from skuferry.errors import ReplacementRefused, SafetyStop

REPLACEMENT_MIN = 10  # below this many products leaving, a run is never a replacement


def ratio_guard(
    count: int,
    known: int,
    *,
    max_ratio: float,
    minimum: int,
    force: bool,
    error: type[SafetyStop],
    what: str,
    key: str,
    advice: str,
) -> None:
    """Raise ``error`` when ``count`` of the ``known`` products is more than ``max_ratio``.

    The message: "<count> of <known> known products (<share>) <what>, more than
    [safety] <key> = <max_ratio>: nothing was written. <advice>".
    """
    if force or count <= minimum or known <= 0:
        return
    ratio = count / known
    if ratio > max_ratio:
        raise error(
            f"{count} of {known} known products ({ratio:.0%}) {what}, more than "
            f"[safety] {key} = {max_ratio}: nothing was written. {advice}"
        )


def replacement_guard(leaving: int, creating: int, known: int, *, force: bool) -> None:
    """Refuse a run that would mark most of the ``known`` catalog gone (or archive it) and
    create as many new products: the same catalog under other keys, far more often than a
    real replacement (a key column swapped, keys reformatted), unless ``--force``."""
    if force or leaving <= REPLACEMENT_MIN or known <= 0:
        return
    if leaving * 2 > known and creating >= leaving:
        raise ReplacementRefused(
            f"{leaving} of {known} known products left the source and {creating} new ones "
            "would be created: that replaces the catalog (another key column, keys "
            "reformatted?); nothing was written. Check the export and the key's column, "
            "then run again with --force if the catalog really is a new one."
        )
