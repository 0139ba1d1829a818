"""Runs triggered by a new export: watch the source file and the join files, debounced.

An ERP drops its export by replacing the file (write elsewhere, rename) or by
writing it slowly in place. Either way one export should start one run, and
only once the file is complete: after a change, the watcher waits until every
watched file's identity, size and mtime have stayed the same for ``quiet_s``
seconds (the quiet time), then calls ``on_change`` once for that version of the files. The files
are the source's and each ``[[join]]``'s local file (``watched_files``): a new PIM
export changes the products as much as a new ERP export does.

Change events come from ``watchfiles`` on the files' folders (a rename replaces
the inode, so a file itself cannot be watched): inotify where it works, else
(the inotify limit reached, a network filesystem) ``watchfiles``' own polling
(``force_polling``) every ``poll_s``, reported once as ``watch.polling``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from skuferry import logs
from skuferry.config.schema import FileSourceSettings, Settings

log = logs.get(__name__)

Signature = tuple[int, int, int]  # (inode, size, mtime_ns): a version of the file
Versions = tuple[Signature | None, ...]  # one per watched file, in order


def signature(path: Path) -> Signature | None:
    try:
        st = path.stat()
    except OSError:
        return None  # missing (between unlink and rename, or not written yet)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def watched_files(settings: Settings) -> list[Path]:
    """The local files whose change starts a run: the source's and each join's, and their
    ``ready_file`` (a run reads an export only once its ready file is there)."""
    found: list[Path] = []
    for source in [settings.source, *(join.source for join in settings.join)]:
        if isinstance(source, FileSourceSettings) and source.remote_scheme() is None:
            # the ready file too: a run that gave up waiting for it starts again when it comes
            ready = [] if source.ready_file is None else [Path(source.ready_file)]
            for path in [Path(source.path), *ready]:
                if path not in found:
                    found.append(path)
    return found


class FileWatch:
    """A daemon thread that calls ``on_change`` once per new version of ``paths`` gone quiet."""

    def __init__(
        self,
        paths: Path | Sequence[Path],
        on_change: Callable[[], None],
        *,
        quiet_s: float = 5.0,
        poll_s: float = 1.0,
        force_polling: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.paths = (paths,) if isinstance(paths, Path) else tuple(paths)
        if not self.paths:
            raise ValueError("nothing to watch")
        self.path = self.paths[0]
        self._on_change = on_change
        self._quiet_s = quiet_s
        self._poll_s = poll_s
        self._force_polling = force_polling
        self._clock = clock
        self._stop = threading.Event()
        self._last: Versions = ()
        self._thread = threading.Thread(target=self._watch, name="skuferry-watch", daemon=True)
        self.mode = "polling" if force_polling else "inotify"

    def start(self) -> FileWatch:
        self._last = self._versions()  # the versions already there are not a change
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _versions(self) -> Versions:
        return tuple(signature(path) for path in self.paths)

    # -- the loop --------------------------------------------------------------------

    def _watch(self) -> None:
        where = [str(p) for p in self.paths]
        # the field keeps its published name, as the config key does: logs are read by tools
        log.info("watch.started", paths=where, settle_s=self._quiet_s, mode=self.mode)
        for _ in self._wakeups():
            if not self._new(self._versions()):
                continue
            quiet = self._wait_quiet(self._versions())
            if quiet is None:
                return  # stopping
            changed = self._new(quiet)
            if changed:
                # a file missing now keeps its last version: its return is a change
                self._last = tuple(
                    now if now is not None else last
                    for now, last in zip(quiet, self._last, strict=True)
                )
                log.info("watch.changed", paths=[str(p) for p in changed])
                try:
                    self._on_change()
                except Exception as exc:  # the watch must outlive a bad callback
                    log.error("watch.callback.failed", error=str(exc), exc_info=exc)

    def _new(self, versions: Versions) -> list[Path]:
        """The files present in ``versions`` in another version than the last one seen."""
        return [
            path
            for path, now, last in zip(self.paths, versions, self._last, strict=True)
            if now is not None and now != last
        ]

    def _wait_quiet(self, current: Versions) -> Versions | None:
        """Wait until the files stay as they are for ``quiet_s``; None when stopping.

        A file that goes missing meanwhile (unlinked before the rename) is not quiet:
        it keeps its version in ``current`` and the wait starts again.
        """
        stable_since = self._clock()
        step = min(0.25, max(0.02, self._quiet_s / 5))
        while not self._stop.wait(step):
            now = self._versions()
            if now != current:
                current = tuple(
                    seen if seen is not None else kept
                    for seen, kept in zip(now, current, strict=True)
                )
                stable_since = self._clock()
                continue
            if self._clock() - stable_since >= self._quiet_s:
                return current
        return None

    def _wakeups(self) -> Iterator[None]:
        """Yield whenever a file may have changed, until stopped."""
        try:
            import watchfiles  # noqa: F401 - a dependency; without it there is no watch
        except ImportError as exc:
            log.error("watch.unavailable", reason=str(exc))
            return
        if not self._force_polling:
            try:
                yield from self._events(polling=False)
                return
            except (OSError, RuntimeError) as exc:  # see the module docstring
                self.mode = "polling"
                reason = str(exc) or repr(exc)
                log.warning("watch.polling", paths=[str(p) for p in self.paths], reason=reason)
        try:
            yield from self._events(polling=True)
        except (OSError, RuntimeError) as exc:  # a folder removed under the watch
            log.error("watch.failed", paths=[str(p) for p in self.paths], error=str(exc))

    def _events(self, *, polling: bool) -> Iterator[None]:
        import watchfiles

        folders = self._folders()
        if folders is None:
            return  # stopping
        names = {path.name for path in self.paths}
        for _changes in watchfiles.watch(
            *folders,
            watch_filter=lambda _change, changed: Path(changed).name in names,
            stop_event=self._stop,
            debounce=50,
            step=20,
            # wake up now and then anyway: a missed event costs at most this delay
            rust_timeout=int(self._poll_s * 1000) * 5,
            yield_on_timeout=True,
            recursive=False,
            raise_interrupt=False,
            force_polling=polling,
            poll_delay_ms=max(1, int(self._poll_s * 1000)),
        ):
            yield None

    def _folders(self) -> list[Path] | None:
        """The watched files' folders, once they all exist (None: stopping meanwhile)."""
        folders = list(dict.fromkeys(path.parent for path in self.paths))
        waiting = False
        while missing := [f for f in folders if not f.is_dir()]:
            if not waiting:
                log.warning("watch.waiting", folders=[str(f) for f in missing])
                waiting = True
            if self._stop.wait(self._poll_s):
                return None
        return folders
