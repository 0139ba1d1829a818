"""Did a paginated pull reach the end? What the pages said, weighed when the walk stops.

A pull that stops early looks complete: the products on the pages it never read
would be taken for gone. So when a walk stops, ``EndProof.check`` compares it
with what the API announced, and raises ``SourceError`` (exit 3: nothing is
planned, written or marked gone) when the evidence says it ended early:

- the API announced a total of records (``total_path``, ``total_header``,
  OData's ``@odata.count``) and fewer arrived;
- it announced a number of pages (``total_pages_path``, ``total_pages_header``)
  and fewer were read;
- with no announcement at all, in next-link pagination: the last page came back
  full (as many records as the largest page before it) without a next link, while
  every page before it had one. A catalog that fills its last page exactly trips
  this rule against an API that drops the link there; an announced total that
  is met settles the question the other way.

The latest announcement counts (a catalog may change during the pull, and an
incremental pull's filtered answer announces the filtered total). Without any of
this evidence the walk's own end (an empty or short page, no next link, no
cursor) is taken as the end, as it always was (the docs on source paths say so).

Pure: ``Totals`` reads a page's announcements, the http source feeds ``EndProof``
one page at a time; a GraphQL source can do the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from skuferry.errors import SourceError
from skuferry.sources.paths import SourcePath


@dataclass(frozen=True, slots=True)
class Announced:
    """What one page says the whole pull holds (None: it does not say)."""

    records: int | None = None
    records_from: str = ""  # where it was read, for the error: "header X-WP-Total"
    pages: int | None = None
    pages_from: str = ""


class EndProof:
    """Tallies the pages of one walk; ``check()`` once it stops."""

    def __init__(self, where: str, *, full_page_rule: bool) -> None:
        self.where = where  # the source, as errors name it
        self.full_page_rule = full_page_rule  # next-link pagination
        self.pages = 0
        self.records = 0
        self.announced = Announced()  # the latest of each kind
        self._largest_before = 0  # the largest page before the last one
        self._last_count = 0
        self._last_had_next = False

    def page(self, count: int, said: Announced, *, has_next: bool = False) -> Announced:
        """Count one page of ``count`` records; the announcements in force after it."""
        if self.pages:
            self._largest_before = max(self._largest_before, self._last_count)
        self.pages += 1
        self.records += count
        self._last_count = count
        self._last_had_next = has_next
        latest = self.announced
        if said.records is not None:
            latest = replace(latest, records=said.records, records_from=said.records_from)
        if said.pages is not None:
            latest = replace(latest, pages=said.pages, pages_from=said.pages_from)
        self.announced = latest
        return latest

    def check(self) -> None:
        """Raise ``SourceError`` when the evidence says the walk stopped before the end."""
        said = self.announced
        ended = f"the pull ended after {self.records} record(s) on {self.pages} page(s)"
        if said.records is not None and self.records < said.records:
            self._fail(
                f"the API announced {said.records} record(s) ({said.records_from}) but {ended}"
            )
        if said.pages is not None and self.pages < said.pages:
            self._fail(f"the API announced {said.pages} page(s) ({said.pages_from}) but {ended}")
        if said.records is not None or said.pages is not None:
            return  # announced and met: that is the proof
        if (
            self.full_page_rule
            and self.pages >= 2
            and not self._last_had_next
            and self._last_count > 0
            and self._last_count >= self._largest_before
        ):
            self._fail(
                f"page {self.pages} came back full ({self._last_count} records, as many as "
                "the pages before it) without a next link, while every page before it had "
                f"one: more may follow, yet {ended}",
                hint="If the catalog really fills its last page exactly, set total_path "
                "(or total_header) to the API's total, or change the page size.",
            )

    def _fail(self, problem: str, *, hint: str = "") -> None:
        raise SourceError(
            f"{self.where}: {problem}; an incomplete pull is not used: nothing is written "
            f"and nothing is marked gone. {hint}".rstrip()
        )


@dataclass(frozen=True, slots=True)
class _Count:
    """Where one count is announced: a path into the body, else a response header."""

    path: SourcePath | None
    header: str | None
    path_key: str = ""  # the setting, as an error names it: "total_path"
    header_key: str = ""
    label: str = ""  # instead of the path_key and path, for a path read unasked

    def read(self, body: Any, headers: Mapping[str, str], where: str) -> tuple[int | None, str]:
        value: Any = None
        said = ""
        if self.path is not None:
            value = self.path.find(body)
            said = self.label or f"{self.path_key} {self.path.describe()}"
        if value is None and self.header is not None:
            value = headers.get(self.header)
            said = f"{self.header_key} {self.header}"
        if value is None:
            return None, ""
        if isinstance(value, str) and value.strip().isdigit():
            return int(value), said
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value, said
        raise SourceError(f"{where}: {said} is {value!r}, not a count")


_ODATA_COUNT = _Count(SourcePath('"@odata.count"', key="@odata.count"), None, label="@odata.count")


class Totals:
    """Reads what a page announces: from its body at a path, else from a response header.

    The records total falls back to OData's ``@odata.count`` when the body has one
    (``$count=true``), so an OData pull proves its end without configuration.
    """

    def __init__(
        self,
        *,
        records_path: SourcePath | None,
        records_header: str | None,
        pages_path: SourcePath | None,
        pages_header: str | None,
    ) -> None:
        self._records = _Count(records_path, records_header, "total_path", "total_header")
        self._pages = _Count(pages_path, pages_header, "total_pages_path", "total_pages_header")

    def read(self, body: Any, headers: Mapping[str, str], *, where: str) -> Announced:
        """The announcements of one page; ``SourceError`` for one that is not a count."""
        records, records_from = self._records.read(body, headers, where)
        if records is None:
            records, records_from = _ODATA_COUNT.read(body, headers, where)
        pages, pages_from = self._pages.read(body, headers, where)
        return Announced(records, records_from, pages, pages_from)
