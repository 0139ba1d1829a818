"""``skuferry check``: the config is valid, the state opens, the source reads, and each API
key makes one authenticated read; the first records shown as read and as mapped.

A source that yields no valid record, or whose shape breaks the contract the state learnt
(``skuferry.shape``: a mapped column gone, the key's column missing), fails the check
(exit 2) as it would fail a sync."""

from __future__ import annotations

import json
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from skuferry import errors

if TYPE_CHECKING:  # rich, the source and the client load when the check runs
    from rich.console import Console

    from skuferry.config.schema import Settings
    from skuferry.shape import Shape
    from skuferry.sources.base import Source
    from skuferry.sync.map.mapper import Mapper


def check(config_path: Path | None, *, show_config: bool, sample: int) -> int:
    """Check the workspace ``config_path`` names (the config first, as ``--show-config``
    prints it, secrets as ***); a problem is raised, the first one found ends the check."""
    from skuferry.config.load import load_settings

    settings = load_settings(config_path)
    if show_config:
        click.echo(json.dumps(settings.redacted(), indent=2, ensure_ascii=False))
    check_settings(settings, sample=sample)
    return errors.EXIT_OK


def check_settings(settings: Settings, *, sample: int = 1) -> None:
    """Config is valid (it loaded); open the state, read the source, one authenticated read.

    The first ``sample`` records are shown as read and as mapped (the sample's renderer).
    """
    from rich.console import Console

    from skuferry.state.mirror import Mirror
    from skuferry.sync.map.mapper import Mapper
    from skuferry.sync.read.pieces import open_pieces

    out = Console(highlight=False, soft_wrap=True)
    out.print(f"config: ok ({settings.config_path})")
    path = settings.state.path
    contract = None
    if path.exists():
        mirror = Mirror(path)
        try:
            contract = mirror.learned_shape()  # the shape the source is held to
        finally:
            mirror.close()
        out.print(f"state: ok ({path})")
    else:  # a check leaves no state behind: the first sync makes it
        try:
            Mirror(path).close()
        finally:
            _remove_new_state(path)
        out.print(f"state: ok ({path}: none yet; the first sync creates it)")
    with ExitStack() as stack:
        source, tables = open_pieces(settings, stack, readonly=True)
        joins = [join.name for join in settings.join]
        mapper = Mapper(
            settings.mapping,
            source_name=source.describe(),
            tables=tables,
            joins=joins,
            empty_values=settings.source.empty_values,
            gone=contract.gone() if contract is not None else (),
        )
        _check_source(out, source, mapper, sample, settings=settings, contract=contract)
    _check_api(out, settings)


def _remove_new_state(path: Path) -> None:
    """The state file ``check`` just made to prove it can be, and its SQLite side files."""
    for made in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        made.unlink(missing_ok=True)


def _check_source(
    out: Console,
    source: Source,
    mapper: Mapper,
    sample: int,
    *,
    settings: Settings,
    contract: Shape | None,
) -> None:
    """Read the whole source (as the mapping sees it) held to the shape the state learnt,
    print counts and the sample; a source with no valid record fails the check."""
    from skuferry.completeness import Ledger
    from skuferry.models import BadRecord
    from skuferry.service.sample import Sample, render, sampled
    from skuferry.sync.read.incremental import Pull, WindowCheck
    from skuferry.sync.read.pieces import pieces_notes
    from skuferry.sync.read.pulled import reported
    from skuferry.sync.read.shape import ShapeWatch
    from skuferry.sync.read.stage import accept_hint

    now = datetime.now(UTC)
    window = WindowCheck(source, now)  # what the records say of their change times
    ledger = Ledger()
    shape = ShapeWatch(
        source,
        mapper,
        contract,
        ledger,
        accept=accept_hint(settings),
        headed=settings.mapping.each is None,
    )
    pull = Pull(full=True, started_at=now, reason="check")
    records = shape.watched(reported(window.records(), ledger, source.describe(), pull=pull))
    good = bad = 0
    first_bad: BadRecord | None = None
    samples: list[Sample] = []
    for item in sampled(records, mapper, keep=sample, into=samples):
        if isinstance(item, BadRecord):
            bad += 1
            first_bad = first_bad or item
        else:
            good += 1
    out.print(f"source: {good:,} valid record(s), {bad:,} rejected ({source.describe()})")
    if first_bad is not None:
        out.print(f"  first rejection: {first_bad.reason}", markup=False)
    for note in pieces_notes(source):
        out.print(f"  note: {note}", markup=False)
    for warning in window.warnings():
        out.print(f"  warning: {warning}", markup=False)
    for line in render(samples):
        out.print(line, markup=False, emoji=False)
    if not good:
        first = f"; the first rejection: {first_bad.reason}" if first_bad is not None else ""
        raise errors.EmptySourceRefused(
            f"the source yields no valid record ({bad:,} rejected){first}: a sync would "
            "change nothing"
        )


def _check_api(out: Console, settings: Settings) -> None:
    """One authenticated read with each API key."""
    from skuferry.config.keys import fingerprint
    from skuferry.remote.client import RemoteClient

    keys = settings.api_keys
    with RemoteClient.from_settings(settings, stop=None, max_retries=1) as client:
        for key in keys:  # without a budget the client takes the keys in turn: each once
            try:
                pages = client.probe()
            except errors.AuthError as exc:
                if len(keys) == 1:
                    raise
                raise errors.AuthError(
                    exc.status, exc.code, f"key {fingerprint(key)}: {exc.message}"
                ) from exc
            except errors.TransportError as exc:
                raise errors.Unreachable(f"{settings.api.base_url}: {exc}") from exc
    with_keys = f" with each of {len(keys)} keys" if len(keys) > 1 else ""
    out.print(
        f"api: ok, authenticated at {settings.api.base_url}{with_keys} "
        f"(products listed: {pages} page(s) at limit 1)"
    )
