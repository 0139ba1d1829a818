"""How fresh the remote is: the oldest source change not yet on it, and the last full pull.

Known changes not yet on the remote:

- a pull whose changes were not all written (a failed write, a stop, a crash):
  the engine keeps its start in the mirror (``pull.unsynced_since``) until a
  run commits everything;
- a file source modified after the last committed pull started: its mtime.

An API or database source changed since the last pull is not known until the
next pull; then the figure is simply absent (``None``), never a guess.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from skuferry.net.paths import is_remote
from skuferry.sync.read import incremental

if TYPE_CHECKING:  # the quick lane reads the figures without pydantic
    from skuferry.config.schema import Settings


UNWRITTEN = "unwritten"  # a run's writes are not all on the remote
SOURCE_CHANGED = "source changed"  # the source file changed after the last full read

_WHAT = {
    UNWRITTEN: "a run's writes are not all on the CMS yet: the next run sends them",
    SOURCE_CHANGED: "the source file changed after the last full read: the next run reads it",
}


@dataclass(frozen=True, slots=True)
class Freshness:
    oldest_unsynced_change: float | None = None  # unix time
    last_full_pull: float | None = None  # unix time the last committed full pull started
    oldest_kind: str | None = None  # UNWRITTEN or SOURCE_CHANGED: what the oldest change is

    @property
    def what(self) -> str:
        """What the oldest change is, as an operator reads it ("none known" when none).

        A source file newer than the last full read is not "unsynced": a hook may
        already have sent the product it changed; the next full run reads the rest.
        """
        return meaning(self.oldest_kind if self.oldest_unsynced_change is not None else None)

    def age_s(self, now: float) -> float | None:
        """Seconds the oldest known change has waited for the remote (None: none known)."""
        if self.oldest_unsynced_change is None:
            return None
        return max(0.0, now - self.oldest_unsynced_change)


def meaning(kind: str | None) -> str:
    """What an oldest change of ``kind`` (``Freshness.oldest_kind``) means; None: none known."""
    return "none known" if kind is None else _WHAT[kind]


def from_metas(metas: incremental.Metas, source_file: Path | None) -> Freshness:
    """The figures from the mirror's meta table and the source file's mtime."""
    known: list[tuple[float, str]] = []
    unsynced = _float(metas.get_meta(incremental.UNSYNCED_SINCE))
    if unsynced is not None:
        known.append((unsynced, UNWRITTEN))
    if source_file is not None:
        watermark = metas.get_meta(incremental.WATERMARK)
        last_pull = datetime.fromisoformat(watermark).timestamp() if watermark else None
        with contextlib.suppress(OSError):  # a missing file is the next run's problem
            mtime = source_file.stat().st_mtime
            if last_pull is None or mtime > last_pull:
                known.append((mtime, SOURCE_CHANGED))
    oldest = min(known) if known else None
    return Freshness(
        oldest_unsynced_change=oldest[0] if oldest else None,
        last_full_pull=_float(metas.get_meta(incremental.LAST_FULL)),
        oldest_kind=oldest[1] if oldest else None,
    )


def read(settings: Settings) -> Freshness | None:
    """The figures for ``settings``' state file; None when it cannot be read (best effort)."""
    return read_at(settings.state.path, source_file(settings))


def read_at(state: Path, source_file: Path | None) -> Freshness | None:
    """The figures of the state file at ``state``; None when it cannot be read."""
    from skuferry.state.mirror import Mirror

    if not state.exists():
        return None
    try:
        mirror = Mirror(state, readonly=True)
    except Exception:  # noqa: BLE001 - StateError or sqlite3.Error; a figure is never worth a failure
        return None
    try:
        return from_metas(mirror, source_file)
    finally:
        mirror.close()


def source_file(settings: Settings) -> Path | None:
    """The local file a file source reads (None for URLs, APIs and databases)."""
    from skuferry.config.schema import FileSourceSettings

    source = settings.source
    path = source.path if isinstance(source, FileSourceSettings) else None
    if path is None or is_remote(path):
        return None
    return Path(path)


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None
