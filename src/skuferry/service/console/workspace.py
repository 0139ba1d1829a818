"""What the page needs of a workspace, whoever serves it.

The page never reaches into a daemon: it is given ``Workspace`` views, one per workspace
the process serves. ``skuferry run`` serves one (``DaemonWorkspace``); a process serving a
directory of workspaces gives one view per workspace, each with its own name, settings,
board and hands (``run_now``, ``retry``, ``undo``). The hands only ask: the run itself happens in
the daemon's own threads, one at a time, as a hook's or the schedule's would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from skuferry.config.schema import Settings

if TYPE_CHECKING:
    from skuferry.service.degraded import Degraded
    from skuferry.service.http_endpoint import Board


class Workspace(Protocol):
    """One workspace as the page sees it."""

    @property
    def name(self) -> str:
        """The workspace's name: a path segment (``/workspaces/<name>``)."""
        ...

    @property
    def settings(self) -> Settings:
        """Its current settings (a reload may change them)."""
        ...

    @property
    def board(self) -> Board:
        """Its health board (``/healthz``'s view of the last run)."""
        ...

    def next_run(self) -> str | None:
        """When its next scheduled run is due (ISO 8601), if one is."""
        ...

    def waiting(self) -> int:
        """Keys queued for it in memory (pushed by hooks or the page), not yet taken."""
        ...

    def degraded(self) -> Degraded | None:
        """The config reload that failed (it runs on the config it had), if the last did."""
        ...

    def waiting_for_slot_s(self) -> float | None:
        """How long its run due has waited for a slot of the fleet's pool (None: no wait)."""
        ...

    def run_now(self) -> None:
        """Ask for a full run now (after the run in flight, if any); returns at once."""
        ...

    def retry(self, keys: Sequence[str]) -> None:
        """Send ``keys`` again as ``skuferry retry`` does (refused data resent); returns at once."""
        ...

    def undo(self, run: int) -> None:
        """Undo run ``run`` as ``skuferry undo`` does, in the daemon's thread; returns at once."""
        ...

    def undo_problem(self, run: int) -> str | None:
        """Why the last undo of ``run`` asked from the page could not start, if it could not."""
        ...


class Daemon(Protocol):
    """What ``DaemonWorkspace`` uses of ``skuferry run``'s daemon."""

    @property
    def settings(self) -> Settings: ...

    @property
    def board(self) -> Board: ...

    def next_run(self) -> str | None: ...

    def request_run(self, reason: str = ...) -> None: ...

    def request_retry(self, keys: list[str]) -> None: ...

    def request_undo(self, run: int) -> None: ...

    @property
    def undo_problems(self) -> dict[int, str]: ...

    def waiting(self) -> int: ...

    @property
    def degraded(self) -> Degraded | None: ...

    def waiting_for_slot_s(self) -> float | None: ...


class DaemonWorkspace:
    """The one workspace of ``skuferry run -c FILE``, named after its config file."""

    def __init__(self, daemon: Daemon, name: str) -> None:
        self._daemon = daemon
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def settings(self) -> Settings:
        return self._daemon.settings

    @property
    def board(self) -> Board:
        return self._daemon.board

    def next_run(self) -> str | None:
        return self._daemon.next_run()

    def waiting(self) -> int:
        return self._daemon.waiting()

    def degraded(self) -> Degraded | None:
        return self._daemon.degraded

    def waiting_for_slot_s(self) -> float | None:
        return self._daemon.waiting_for_slot_s()

    def run_now(self) -> None:
        self._daemon.request_run("the operator's page")

    def retry(self, keys: Sequence[str]) -> None:
        self._daemon.request_retry(list(keys))

    def undo(self, run: int) -> None:
        self._daemon.request_undo(run)

    def undo_problem(self, run: int) -> str | None:
        return self._daemon.undo_problems.get(run)
