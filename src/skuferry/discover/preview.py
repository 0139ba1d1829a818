"""The edge that shows a proposed config at work, writing nothing to the CMS.

Read back through the sources and the mapper exactly as a sync reads (``open_pieces``,
``Mapper``), limited to the sample's records: the first records as read and the
payloads the mapping makes of them (``check``'s renderer), then a dry run of those
records (the engine's own plan: the rows it refuses and why, duplicates included, and
its counts). With a CMS key in the environment, one authenticated read says how many
products the CMS lists; nothing is written, remote or local.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from skuferry import errors
from skuferry.config.schema import Settings
from skuferry.discover.read import closing
from skuferry.models import BadRecord, RawRecord, RunOptions, RunSummary
from skuferry.service.sample import Sample, render, sampled
from skuferry.sources.base import Source, WrappedSource
from skuferry.sources.dispatch import open_source
from skuferry.sync.context import Adapters
from skuferry.sync.engine import run_once
from skuferry.sync.map.mapper import Mapper
from skuferry.sync.read.pieces import open_pieces

SHOWN = 3
LISTED = 10  # refused rows listed by line; the count is whole


class FirstRecords(WrappedSource):
    """The first ``limit`` records of ``inner``: a preview never reads a big file whole."""

    def __init__(self, inner: Source, limit: int) -> None:
        super().__init__(inner)
        self.limit = limit
        self.ended = False  # the source ended within the limit

    def records(self) -> Iterator[RawRecord | BadRecord]:
        with closing(self.inner.records()) as stream:
            yield from itertools.islice(stream, self.limit)
            self.ended = next(stream, None) is None


@dataclass
class Preview:
    """What the proposed config makes of the sample."""

    samples: list[Sample]
    plan: RunSummary
    records: int  # how many records the plan read
    whole: bool  # ... which are the whole source
    cms: list[str] = field(default_factory=list)  # what the CMS said, if asked


def preview(settings: Settings, *, limit: int, cms: bool, shown: int = SHOWN) -> Preview:
    """The proposal at work on the first ``limit`` records; ``cms``: also ask the CMS."""
    samples: list[Sample] = []
    with contextlib.ExitStack() as stack:
        base = FirstRecords(open_source(settings.source), shown)
        source, tables = open_pieces(settings, stack, base=base, readonly=True)
        mapper = Mapper(
            settings.mapping,
            source_name=source.name,
            tables=tables,
            joins=[join.name for join in settings.join],
            empty_values=settings.source.empty_values,
        )
        for _ in itertools.islice(
            sampled(source.records(), mapper, keep=shown, into=samples), shown
        ):
            pass
    first = FirstRecords(open_source(settings.source), limit)
    summary = run_once(settings, RunOptions(dry_run=True), adapters=Adapters(source=first))
    read = summary.unchanged + summary.created + summary.updated + summary.rejected
    said = _ask_cms(settings) if cms else []
    return Preview(samples, summary, read, first.ended, said)


def _ask_cms(settings: Settings) -> list[str]:
    """One authenticated read: how many products the CMS lists (a failure is said)."""
    from skuferry.remote.client import RemoteClient

    url = settings.api.base_url
    try:
        with RemoteClient.from_settings(settings, stop=None, max_retries=1) as client:
            products = client.probe()
    except errors.AuthError as exc:
        return [f"the CMS at {url} refused the key ({exc}): check SKUFERRY_API_KEY"]
    except errors.ApiError as exc:
        return [f"the CMS at {url} could not be asked: {exc}"]
    return [
        f"the CMS at {url} lists {products:,} product(s) now; before its first create the "
        "sync walks that list (1 read per 100) and links the products it finds by key "
        "instead of creating them again"
    ]


def lines(result: Preview, *, whole_known: bool) -> list[str]:
    """What ``init`` prints of the preview."""
    out = ["", f"The first {len(result.samples)} records, as read and as the mapping makes them:"]
    out += render(result.samples)
    plan = result.plan
    scope = (
        "the whole source"
        if result.whole or whole_known
        else f"the first {result.records:,} records (the sync reads them all)"
    )
    out.append("")
    out.append(f"A dry run of {scope}, nothing written:")
    out.append(
        f"  would create {plan.created:,}, update {plan.updated:,}, leave {plan.unchanged:,} "
        f"unchanged; refuse {plan.rejected:,}"
        + (f"; skip {plan.skipped:,} (on purpose)" if plan.skipped else "")
    )
    problems: list[dict[str, Any]] = list(plan.problems)
    if problems:
        first = f" (the first {LISTED})" if len(problems) > LISTED else ""
        out.append(f"  rows it would refuse, and why{first}:")
        for problem in problems[:LISTED]:
            out.append(f"    {problem['reason']}")
    for note in plan.notes:
        if not note.startswith("dry run:"):
            out.append(f"  note: {note}")
    for line in result.cms:
        out.append(f"  {line}")
    return out
