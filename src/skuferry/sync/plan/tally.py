"""What a plan finds out on the way, and whether its records prove a product gone. Pure.

A bad row whose product cannot be told for sure (no readable key, or fields that may
be shifted) could be any product: a full pull with such a row decides nothing gone.
The completeness ledger holds the rule; here the plan reports those rows to it and
notes when they alone stopped the gone decisions.
"""

from __future__ import annotations

import dataclasses

from skuferry.completeness import Ledger, Reader


@dataclasses.dataclass
class Tally:
    """What ``plan()`` found out on the way that the run's summary reports."""

    # Rejected rows whose product cannot be told for sure: no readable key, or a key
    # read from fields that may be shifted. Any of them stops a full pull's gone decisions.
    unsure: int = 0
    gone_skipped: bool = False  # a full pull decided nothing gone because of them


def absence_proven(ledger: Ledger | None, tally: Tally, *, full: bool) -> bool:
    """Whether the records just planned prove a product gone by its absence (the ledger's
    rule); rows whose product cannot be told for sure are reported there first.

    Without a ``ledger``, one holding a single verdict for the records is made from
    ``full``."""
    if ledger is None:
        ledger = Ledger()
        if full:
            ledger.complete(Reader.SOURCE, "records")
        else:
            ledger.incomplete(Reader.SOURCE, "records", "not a full pull")
    proven = ledger.may_mark_gone()
    if tally.unsure:
        ledger.incomplete(
            Reader.ROWS,
            "rejected",
            f"{tally.unsure} rejected row(s) whose product cannot be told for sure",
        )
    if ledger.may_mark_gone():
        return True
    tally.gone_skipped = proven and tally.unsure > 0  # the rows alone stopped them
    return False
