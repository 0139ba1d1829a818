"""What asks the daemon for runs besides its schedule: the file watch and the HTTP side.

``[schedule] watch`` starts a run when the source file (or a join file) goes quiet after
a change; ``[daemon] listen`` serves /metrics, /healthz, the hooks and the operator's
page. A reload restarts the watch when what it watches changed; the HTTP side keeps
what it was started with until a restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from skuferry import logs
from skuferry.config.schema import Settings
from skuferry.service import hooks_http
from skuferry.service.http_app import Router
from skuferry.service.http_endpoint import Board, Endpoint, Hook
from skuferry.service.http_server import Limits
from skuferry.service.watch import FileWatch, watched_files

# The daemon's logger: these events were always the daemon's, and tools match the logger.
log = logs.get("skuferry.service.daemon")


def http_side(settings: Settings) -> tuple[str | None, Limits]:
    """What the HTTP side was started with; a reload does not restart it."""
    daemon = settings.daemon
    return daemon.listen, Limits.of(daemon, max_body_bytes=hooks_http.MAX_BODY_BYTES)


class Listeners:
    """The daemon's file watch and HTTP endpoint, each there only when configured."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._watch: FileWatch | None = None
        self._endpoint: Endpoint | None = None

    def listen(
        self,
        listen: str,
        settings: Settings,
        board: Board,
        hooks: Sequence[Hook],
        console: Callable[[Router], object],
    ) -> None:
        _listen, limits = http_side(settings)
        self._endpoint = Endpoint(listen, board, hooks, limits=limits, console=console).start()

    def watch(self, settings: Settings, on_change: Callable[[], None]) -> None:
        """(Re)start the watch of the source's file and the joins' files, if one is asked."""
        if self._watch is not None:
            self._watch.stop()
            self._watch = None
        paths = watched_files(settings)  # the source's file and the joins' files
        if settings.schedule.watch and paths:
            self._watch = FileWatch(
                paths,
                on_change,
                quiet_s=settings.schedule.watch_settle_s,
                clock=self._clock,
            ).start()

    def reloaded(self, old: Settings, new: Settings, on_change: Callable[[], None]) -> None:
        """A new config: a new watch if what it watches changed; the HTTP side stays."""
        if (new.schedule.watch, new.schedule.watch_settle_s, watched_files(new)) != (
            old.schedule.watch,
            old.schedule.watch_settle_s,
            watched_files(old),
        ):
            self.watch(new, on_change)
        if http_side(new) != http_side(old):
            log.warning(
                "daemon.reload.listen_kept",
                listen=old.daemon.listen,
                hint="a new [daemon] listen or http_* limit takes effect on restart",
            )

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()
        if self._endpoint is not None:
            self._endpoint.stop()

    @property
    def url(self) -> str | None:
        return self._endpoint.url if self._endpoint is not None else None
