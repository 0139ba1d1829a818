"""One list page of the products, as an inconsistent or lagging CMS would serve it.

The injected faults are what a real list does under load or behind an index:
a page that comes back empty or short, a page served twice, the pages shifted by a
product deleted before the reader's offset, a ``meta.pages`` that does not match the
products. ``created_by`` hides the products created after it (a list lagging behind
writes); a GET by id is not served from here, so it sees them at once.
"""

from __future__ import annotations

from typing import Any

from skuferry.sandbox.faults import ListFaultKind
from skuferry.sandbox.store import Collection


def list_page(
    collection: Collection,
    workspace: str,
    *,
    page: int,
    limit: int,
    fault: ListFaultKind | None = None,
    created_by: float | None = None,
    shifted: int = 0,
) -> tuple[list[dict[str, Any]], int, ListFaultKind | None]:
    """(items, total the meta counts, the fault applied or None) of page ``page``.

    ``shifted``: products "deleted" before the reader's offset earlier in this walk; a
    ``list_shifted`` fault adds one, and the caller carries it to the walk's next pages.
    """
    if fault == "list_repeated" and page == 1:
        fault = None  # no page before it to serve again
    if fault == "list_shifted":
        shifted += 1  # one product before this page is gone: all move one place forward
    start = (page - 1) * limit + shifted
    if fault == "list_repeated":
        start -= limit
    items, total = collection.window(
        workspace, start=start, stop=start + limit, created_by=created_by
    )
    total = max(0, total - shifted)
    if fault == "list_empty":
        items = []
    elif fault == "list_short":
        if not items or start - shifted + limit >= total:  # the last page: a product lost
            fault = None  # from the list (a shift by a delete), not a short page
        else:
            items = items[:-1]
    elif fault == "list_pages_changed":
        total += limit  # one page more than the products fill
    return items, total, fault
