"""``ready_file``: read an export only once its exporter says it is whole.

Many exporters write a trigger file when they are done (``catalog.csv.done``,
``.ok``). With ``ready_file`` set, a pull first waits for it, at most
``ready_timeout_s``; a ready file older than the export does not count (it is
the previous export's, and the export is being written again). If it does not
come, nothing is read and the run ends with ``SourceNotReady`` (exit 75, a
temporary failure: the next run, or the daemon's watch when the file comes,
tries again). After the read, the export must still be the file that was ready:
an export replaced or rewritten while it was read fails the pull (exit 3).

The wait polls the two files' mtimes (a trigger file is written once, and this
also works on network filesystems); the engine's stop event ends it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from skuferry import logs
from skuferry.errors import Interrupted, SourceError, SourceNotReady
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.base import Source, WrappedSource

log = logs.get(__name__)

POLL_S = 0.5
_T = TypeVar("_T")
Signature = tuple[int, int, int]  # (inode, size, mtime_ns)


def _stat(path: Path) -> Signature | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class ReadyGate:
    """Waits for ``ready`` to be at least as new as ``export``; checks the export after."""

    def __init__(
        self,
        export: Path,
        ready: Path,
        *,
        timeout_s: float,
        stop: threading.Event | None = None,
        poll_s: float = POLL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.export = export
        self.ready = ready
        self.timeout_s = timeout_s
        self.stop = stop or threading.Event()
        self.poll_s = poll_s
        self.clock = clock
        self._signature: Signature | None = None

    def is_ready(self) -> bool:
        """The ready file is there and not older than the export (or the export is missing:
        the reader then says so)."""
        ready = _stat(self.ready)
        export = _stat(self.export)
        if ready is None:
            return False
        return export is None or ready[2] >= export[2]

    def wait(self) -> None:
        """Return once the export is ready; ``SourceNotReady`` after ``timeout_s``."""
        deadline = self.clock() + self.timeout_s
        told = False
        while not self.is_ready():
            left = deadline - self.clock()
            if left <= 0:
                raise SourceNotReady(
                    f"{self.export.name}: the ready file {self.ready} "
                    + ("did not come" if _stat(self.ready) is None else "is older than the export")
                    + f" within ready_timeout_s = {self.timeout_s:g}: the export may still be "
                    "being written, so nothing was read (the next run tries again)"
                )
            if not told:
                log.info("source.ready.waiting", export=str(self.export), ready=str(self.ready))
                told = True
            if self.stop.wait(min(self.poll_s, left)):
                raise Interrupted(f"stopped while waiting for {self.ready}")
        self._signature = _stat(self.export)

    def after(self) -> None:
        """``SourceError`` when the export was replaced or rewritten while it was read."""
        if self._signature is not None and _stat(self.export) != self._signature:
            raise SourceError(
                f"{self.export.name} changed while it was read (a new export began): none of "
                "it is used; nothing is written and nothing is marked gone"
            )


class ReadySource(WrappedSource):
    """``inner``'s records, read only once ``gate`` says the export is whole."""

    def __init__(self, inner: Source, gate: ReadyGate) -> None:
        super().__init__(inner)
        self.gate = gate

    def records(self) -> Iterator[RawRecord | BadRecord]:
        return self.gated(self.inner.records)

    def gated(self, read: Callable[[], Iterator[_T]]) -> Iterator[_T]:
        self.gate.wait()
        yield from read()
        self.gate.after()
