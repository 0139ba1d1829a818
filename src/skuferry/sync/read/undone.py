"""An undone feed is not written again: the one refusal of a source ``skuferry undo`` took back.

``skuferry undo RUN`` puts back on the CMS what run RUN changed, and marks the feed RUN
read as undone (``mark``), by two names the run noted in its row:

- its skip token (``runs.token``: the config's identity and each change token, as the
  skip decision stores it), known before anything is read, but only when the source can
  tell its change cheaply;
- its feed identity (``runs.feed``, ``feed_now``: the config's identity and the content
  digest of what the run read: the source's ``feed_digest``, each join's, each table
  file's), known once the run read its whole source, whatever the source: a file
  written in the last two seconds, an API without ``ETag``/``Last-Modified``.

A run whose source has a marked token is refused before it reads anything; one whose
feed identity is a marked one is refused once its plan is filled, before any guard or
write (``check``: ``UndoneFeedRefused``, exit 2, nothing written), with a message naming
the undo, until the export or the config changes. A refusal by content teaches the mark
the run's token, so the next run over the same file is refused before reading. ``--force``
writes the feed anyway and forgets the mark; a dry run says so in a note instead. The
daemon's runs are runs like any: it keeps to it between runs. The undo of an undo forgets
the mark of the feed that undo had refused (``lift``): the operator put that feed's
values back on purpose.

A run that read only part of its source (an incremental window, keys fetched one by one)
and had no token cannot be recognised: the undo says so.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from skuferry import logs
from skuferry.config.schema import Settings, TableFile
from skuferry.errors import UndoneFeedRefused
from skuferry.models import RunSummary
from skuferry.sources.base import Source
from skuferry.sources.digest import file_digest
from skuferry.sync import skip
from skuferry.sync.read.pieces import join_contents, join_tokens

log = logs.get("skuferry.sync.engine")

# meta rows "undone.<run>": {"undo": <the undo's run>, "tokens": [...], "feed": ...}
# (a mark written before feeds were known has "token" alone)
UNDONE_META = "undone."
FEED = "feed:1:"  # a feed identity: the scheme, then the SHA-256 of its parts
TOKENS_KEPT = 8  # the tokens a mark keeps: its run's, then those refusals by content taught


class Marks(Protocol):
    def metas(self, prefix: str) -> list[tuple[str, str]]: ...

    def set_metas(self, values: Mapping[str, str | None]) -> None: ...


@dataclass(frozen=True, slots=True)
class Undone:
    """A feed taken back: run ``run`` read it, run ``undo`` put back what it wrote. Known by
    its skip tokens (``tokens``) or its content (``feed``)."""

    run: int
    undo: int
    tokens: tuple[str, ...] = ()
    feed: str | None = None

    def words(self) -> str:
        return (
            f"the source is the feed run {self.run} read, which `skuferry undo {self.run}` "
            f"(run {self.undo}) took back"
        )

    def matches(self, token: str | None, feed: str | None) -> bool:
        """This feed, by the run's token or by its content."""
        return (token is not None and token in self.tokens) or (
            feed is not None and feed == self.feed
        )

    def value(self) -> str:
        return json.dumps({"undo": self.undo, "tokens": list(self.tokens), "feed": self.feed})


def marks(mirror: Marks) -> list[Undone]:
    found = []
    for run, value in mirror.metas(UNDONE_META):
        try:
            data = json.loads(value)
            tokens = data.get("tokens") or ([data["token"]] if data.get("token") else [])
            feed = data.get("feed")
            found.append(
                Undone(
                    int(run),
                    int(data["undo"]),
                    tuple(str(t) for t in tokens),
                    str(feed) if feed else None,
                )
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # not ours: never refuse on a row that cannot be read
    return found


def mark(mirror: Marks, token: str | None, *, feed: str | None = None, run: int, undo: int) -> bool:
    """Refuse the feed of ``token`` or ``feed`` from now on (False: neither is known,
    nothing can be refused)."""
    if token is None and feed is None:
        return False
    taken = Undone(run, undo, (token,) if token is not None else (), feed)
    mirror.set_metas({UNDONE_META + str(run): taken.value()})
    return True


def lift(mirror: Marks, *, undo: int) -> list[Undone]:
    """The undo of run ``undo`` (itself an undo): the feed it refused may go again."""
    lifted = [m for m in marks(mirror) if m.undo == undo]
    if lifted:
        mirror.set_metas({UNDONE_META + str(m.run): None for m in lifted})
    return lifted


def found(mirror: Marks, token: str | None, *, feed: str | None = None) -> Undone | None:
    """The undo whose feed has ``token`` or is ``feed``, if any."""
    if token is None and feed is None:
        return None
    return next((m for m in marks(mirror) if m.matches(token, feed)), None)


def token_now(settings: Settings, base: Source, source: Source) -> str | None:
    """The skip token of the source as it is now, as the skip decision takes it (for runs
    that do not ask it: named keys, dry runs)."""
    change = base.change_token(None)
    parts = [change, *skip.joined(settings, join_tokens(source))] if change is not None else [None]
    return skip.token(skip.identity(settings), parts)


def feed_now(settings: Settings, base: Source, source: Source) -> str | None:
    """The feed the last reading of ``base`` (and ``source``, the same in pieces) read, by
    its content: the config's identity, the source's feed digest, each join's, each
    ``[mapping.tables]`` file's. None when any is unknown (the source not read to its
    end, or read in part: an incremental window, keys fetched one by one)."""
    joins = join_contents(source)
    if len(joins) != len(settings.join):
        return None
    tables = [t for t in settings.mapping.tables.values() if isinstance(t, TableFile)]
    parts = [base.feed_digest(), *joins, *(file_digest(Path(t.file)) for t in tables)]
    if any(part is None for part in parts):
        return None
    text = "\n".join([skip.identity(settings), *map(str, parts)])
    return FEED + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def check(
    mirror: Marks,
    token: str | None,
    *,
    feed: str | None = None,
    force: bool,
    dry_run: bool,
    summary: RunSummary,
) -> None:
    """Refuse a run whose source is an undone feed (``UndoneFeedRefused``, exit 2, nothing
    written), by its ``token`` (before anything is read) or its ``feed`` (once read, before
    anything is written); ``force`` writes it anyway (the mark goes); a dry run notes it.
    A refusal by ``feed`` teaches the mark ``token``: the next run stops before reading."""
    hit = found(mirror, token, feed=feed)
    if hit is None:
        return
    if dry_run:
        would = "a run would be refused (change the export, or sync --force)"
        _note(summary, f"{hit.words()}: {would}")
        return
    if force:
        mirror.set_metas(
            {UNDONE_META + str(m.run): None for m in marks(mirror) if m.matches(token, feed)}
        )
        _note(summary, f"{hit.words()}: written anyway (--force)")
        log.warning("sync.undone_feed.forced", run=hit.run, undo=hit.undo)
        return
    if token is not None and token not in hit.tokens:  # known by its content this time
        tokens = (*hit.tokens, token)[-TOKENS_KEPT:]
        taught = Undone(hit.run, hit.undo, tokens, hit.feed)
        mirror.set_metas({UNDONE_META + str(hit.run): taught.value()})
    log.error(
        "sync.undone_feed.refused",
        run=hit.run,
        undo=hit.undo,
        by="token" if token is not None and token in hit.tokens else "content",
    )
    raise UndoneFeedRefused(
        f"{hit.words()}: it is not written again. Change the export (or the config), or "
        "run with --force to write it anyway"
    )


def _note(summary: RunSummary, note: str) -> None:
    if note not in summary.notes:  # the token's check and the content's may both find it
        summary.notes.append(note)
