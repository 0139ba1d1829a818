"""An undone feed is not written again: the one refusal of a source ``skuferry undo`` took back.

``skuferry undo RUN`` puts back on the CMS what run RUN changed, and marks the skip token
of the source RUN read (the config's identity and each change token, as the skip decision
stores it: ``runs.token``) as undone (``mark``). A run whose source has that very token
is refused before it reads anything (``check``: exit 2, nothing written), with a message
naming the undo, until the export or the config changes; ``--force`` writes it anyway and
forgets the mark. A dry run says so in a note instead. The daemon's runs are runs like
any: it keeps to it between runs. The undo of an undo forgets the mark of the feed that
undo had refused (``lift``): the operator put that feed's values back on purpose.

A source that cannot tell its change cheaply (no token) cannot be recognised: its runs
are not refused (the undo says so).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from skuferry import logs
from skuferry.config.schema import Settings
from skuferry.errors import UndoneFeedRefused
from skuferry.models import RunSummary
from skuferry.sources.base import Source
from skuferry.sync import skip
from skuferry.sync.read.pieces import join_tokens

log = logs.get("skuferry.sync.engine")

UNDONE_META = "undone."  # meta rows "undone.<run>": {"token": ..., "undo": <the undo's run>}


class Marks(Protocol):
    def metas(self, prefix: str) -> list[tuple[str, str]]: ...

    def set_metas(self, values: Mapping[str, str | None]) -> None: ...


@dataclass(frozen=True, slots=True)
class Undone:
    """A feed taken back: run ``run`` read it, run ``undo`` put back what it wrote."""

    run: int
    undo: int
    token: str

    def words(self) -> str:
        return (
            f"the source is the feed run {self.run} read, which `skuferry undo {self.run}` "
            f"(run {self.undo}) took back"
        )


def marks(mirror: Marks) -> list[Undone]:
    found = []
    for run, value in mirror.metas(UNDONE_META):
        try:
            data = json.loads(value)
            found.append(Undone(int(run), int(data["undo"]), str(data["token"])))
        except (ValueError, KeyError, TypeError):
            continue  # not ours: never refuse on a row that cannot be read
    return found


def mark(mirror: Marks, token: str | None, *, run: int, undo: int) -> bool:
    """Refuse the feed of ``token`` from now on (False: no token, nothing can be refused)."""
    if token is None:
        return False
    mirror.set_metas({UNDONE_META + str(run): json.dumps({"token": token, "undo": undo})})
    return True


def lift(mirror: Marks, *, undo: int) -> list[Undone]:
    """The undo of run ``undo`` (itself an undo): the feed it refused may go again."""
    lifted = [m for m in marks(mirror) if m.undo == undo]
    if lifted:
        mirror.set_metas({UNDONE_META + str(m.run): None for m in lifted})
    return lifted


def found(mirror: Marks, token: str | None) -> Undone | None:
    """The undo whose feed has ``token``, if any."""
    if token is None:
        return None
    return next((m for m in marks(mirror) if m.token == token), None)


def token_now(settings: Settings, base: Source, source: Source) -> str | None:
    """The skip token of the source as it is now, as the skip decision takes it (for runs
    that do not ask it: named keys, dry runs)."""
    change = base.change_token(None)
    parts = [change, *skip.joined(settings, join_tokens(source))] if change is not None else [None]
    return skip.token(skip.identity(settings), parts)


def check(
    mirror: Marks, token: str | None, *, force: bool, dry_run: bool, summary: RunSummary
) -> None:
    """Refuse a run whose source is an undone feed (``UndoneFeedRefused``, exit 2, before
    anything is read); ``force`` writes it anyway (the mark goes); a dry run notes it."""
    hit = found(mirror, token)
    if hit is None:
        return
    if dry_run:
        summary.notes.append(
            f"{hit.words()}: a run would be refused (change the export, or sync --force)"
        )
        return
    if force:
        mirror.set_metas(
            {UNDONE_META + str(m.run): None for m in marks(mirror) if m.token == token}
        )
        summary.notes.append(f"{hit.words()}: written anyway (--force)")
        log.warning("sync.undone_feed.forced", run=hit.run, undo=hit.undo)
        return
    log.error("sync.undone_feed.refused", run=hit.run, undo=hit.undo)
    raise UndoneFeedRefused(
        f"{hit.words()}: it is not written again. Change the export (or the config), or "
        "run with --force to write it anyway"
    )
