"""The map stage of a run: the mapping over the source the read stage opened."""

from __future__ import annotations

from contextlib import ExitStack

from skuferry.completeness import Ledger
from skuferry.sources.base import Source
from skuferry.sync.map.mapper import Mapper
from skuferry.sync.read import stage as read_stage
from skuferry.sync.read.pieces import use_keys
from skuferry.sync.read.stage import ReadRun


def open_mapped(
    run: ReadRun,
    stack: ExitStack,
    *,
    readonly: bool,
    ledger: Ledger | None = None,
    allow_empty: bool = False,
) -> tuple[Source, Source, Mapper]:
    """The source as read, the same in pieces, and the mapping that reads it.

    ``readonly``: join indexes are built in a temporary folder (a dry run, the urgent
    lane's second reading); ``ledger``: where each join reports its verdict; an empty
    join is refused unless ``allow_empty``."""
    base, source, tables = read_stage.open_source(
        run, stack, readonly=readonly, ledger=ledger, allow_empty=allow_empty
    )
    settings = run.settings
    mapper = Mapper(
        settings.mapping,
        source_name=source.name,
        tables=tables,
        joins=[join.name for join in settings.join],
        empty_values=settings.source.empty_values,
        gone=run.contract.gone() if run.contract is not None else (),
    )
    use_keys(source, mapper.key_of)  # a record the filter fails on holds its product
    return base, source, mapper
