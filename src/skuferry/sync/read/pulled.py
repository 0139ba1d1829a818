"""A pull reports its verdict to the run's ledger: complete, or not and why.

The readers do not know the ledger: they stream records, and fail the pull with
``SourceError`` when it cannot be whole (a torn end, a cut ``.gz``, a page walk
that stopped early). ``reported`` wraps what they stream, once, for every pull
of the primary source: when the records are exhausted the pull was read to its
end; when the reader fails, the verdict says why before the error ends the run.
What the pull is decides what its end proves:

- a full pull read to its end is complete: absence from it proves a product gone
  (or filtered out);
- an incremental pull holds only the changed records, and a named pull
  (``--only``, ``retry``, the daemon's hooks) only the named ones: absence
  proves nothing, whatever the reader says;
- a named pull fetched by ``[source] item_url`` also reports its fetches
  (``Reader.ITEMS``).

The planner asks the ledger (``Ledger.may_mark_gone``), never the pull.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

from skuferry.completeness import Ledger, Reader
from skuferry.errors import SourceError
from skuferry.sync.read.incremental import Pull
from skuferry.sync.read.named import NamedPull

_Item = TypeVar("_Item")


def reported(
    records: Iterable[_Item],
    ledger: Ledger,
    where: str,
    *,
    pull: Pull | None,
    named: NamedPull | None = None,
) -> Iterator[_Item]:
    """``records`` as they come; the pull's verdict in ``ledger`` once they stop."""
    if named is not None:
        ledger.incomplete(Reader.SOURCE, where, f"a named pull of {len(named.keys)} key(s)")
    elif pull is None or not pull.full:
        ledger.incomplete(
            Reader.SOURCE, where, "an incremental pull: only the changed records are read"
        )
    try:
        yield from records
    except SourceError as exc:
        reader = Reader.ITEMS if named is not None and named.fetched_by_key else Reader.SOURCE
        ledger.incomplete(reader, where, str(exc))
        raise
    if named is not None and named.fetched_by_key:
        ledger.complete(Reader.ITEMS, where)
    elif named is None and pull is not None and pull.full:
        ledger.complete(Reader.SOURCE, where)
