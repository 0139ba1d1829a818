"""Runs triggered by a new export: watch the source file, debounced.

An ERP drops its export by replacing the file (write elsewhere, rename) or by
writing it slowly in place. Either way one export should start one run, and
only once the file is complete: after a change, the watcher waits until the
file's identity, size and mtime have stayed the same for ``settle_s`` seconds,
then calls ``on_change`` once for that version of the file.

Change events come from inotify through ``watchfiles`` on the file's folder
(a rename replaces the inode, so the file itself cannot be watched); where
inotify is unavailable (no ``watchfiles``, the inotify limit reached, a network
filesystem) the watcher polls the file's status every ``poll_s`` instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from skuferry import logs

log = logs.get(__name__)

Signature = tuple[int, int, int]  # (inode, size, mtime_ns): a version of the file


def signature(path: Path) -> Signature | None:
    try:
        st = path.stat()
    except OSError:
        return None  # missing (between unlink and rename, or not written yet)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class FileWatch:
    """A daemon thread that calls ``on_change`` once per settled new version of ``path``."""

    def __init__(
        self,
        path: Path,
        on_change: Callable[[], None],
        *,
        settle_s: float = 5.0,
        poll_s: float = 1.0,
        force_polling: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._on_change = on_change
        self._settle_s = settle_s
        self._poll_s = poll_s
        self._force_polling = force_polling
        self._clock = clock
        self._stop = threading.Event()
        self._last: Signature | None = None
        self._thread = threading.Thread(target=self._watch, name="skuferry-watch", daemon=True)
        self.mode = "polling" if force_polling else "inotify"

    def start(self) -> FileWatch:
        self._last = signature(self.path)  # the version already there is not a change
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    # -- the loop --------------------------------------------------------------------

    def _watch(self) -> None:
        log.info("watch.started", path=str(self.path), settle_s=self._settle_s, mode=self.mode)
        for _ in self._wakeups():
            current = signature(self.path)
            if current is None or current == self._last:
                continue
            settled = self._settle(current)
            if settled is None:
                return  # stopping
            if settled != self._last:
                self._last = settled
                log.info("watch.changed", path=str(self.path), size=settled[1])
                try:
                    self._on_change()
                except Exception as exc:  # the watch must outlive a bad callback
                    log.error("watch.callback.failed", error=str(exc), exc_info=exc)

    def _settle(self, current: Signature) -> Signature | None:
        """Wait until the file stays as it is for ``settle_s``; None when stopping."""
        stable_since = self._clock()
        step = min(0.25, max(0.02, self._settle_s / 5))
        while not self._stop.wait(step):
            now = signature(self.path)
            if now != current or now is None:
                current, stable_since = now or current, self._clock()
                continue
            if self._clock() - stable_since >= self._settle_s:
                return current
        return None

    def _wakeups(self) -> Iterator[None]:
        """Yield whenever the file may have changed, until stopped."""
        if not self._force_polling:
            try:
                yield from self._inotify()
                return
            except (ImportError, OSError, RuntimeError) as exc:  # see the module docstring
                self.mode = "polling"
                log.warning("watch.polling", path=str(self.path), reason=str(exc) or repr(exc))
        while not self._stop.wait(self._poll_s):
            yield None

    def _inotify(self) -> Iterator[None]:
        import watchfiles

        name = self.path.name
        for _changes in watchfiles.watch(
            self.path.parent,
            watch_filter=lambda _change, changed: Path(changed).name == name,
            stop_event=self._stop,
            debounce=50,
            step=20,
            # wake up now and then anyway: a missed event costs at most this delay
            rust_timeout=int(self._poll_s * 1000) * 5,
            yield_on_timeout=True,
            recursive=False,
            raise_interrupt=False,
        ):
            yield None
