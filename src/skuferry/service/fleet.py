"""Many workspaces in one process: ``skuferry run --workspaces DIR [--shard K/N]``.

``run`` composes one ``Daemon`` per workspace: its own
scheduler, budgets, state lock and run threads, so one never waits for another's
budget, and one that is slow, failing or refused stalls no other. Their full runs share
one pool (``--max-runs``, ``run_slots``): at most N at once, the others late and saying
so, never skipped. The process serves one HTTP side for all of them (``--listen``, the
daemon's ``Endpoint``): ``/livez``, ``/healthz``, ``/metrics`` with
``workspace="<name>"`` on every sample, the page, and the hooks routed per workspace,
each checked with that workspace's own secret. SIGHUP re-reads DIR: an added file
starts a workspace, a changed one reloads it, a removed one stops it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from skuferry import errors, logs
from skuferry.config.load import load_settings
from skuferry.config.schema import DaemonSettings, Settings
from skuferry.service import hooks_http, metrics
from skuferry.service.daemon import STOP_TIMEOUT_S, Daemon, Job
from skuferry.service.failures import describe
from skuferry.service.http_app import Request, Response
from skuferry.service.http_endpoint import Endpoint, hook_answer
from skuferry.service.http_server import Limits
from skuferry.service.notify import Notifier
from skuferry.service.run_slots import RunSlots, default_size
from skuferry.service.signals import stop_and_reload_on_signals
from skuferry.service.workspaces import Shard, load_workspace, workspace_files

log = logs.get(__name__)

JOIN_S = STOP_TIMEOUT_S + 1.0  # a workspace's daemon stops within its own deadline
START_THREADS = 16  # workspaces opened side by side at start (their state files)


# --- run: one daemon per workspace -------------------------------------------------------


@dataclass
class Member:
    """One workspace of the fleet: its daemon while it runs, or why it does not."""

    name: str
    path: Path
    stamp: tuple[int, int] | None
    daemon: Daemon | None = None
    thread: threading.Thread | None = None
    desk: hooks_http.Desk | None = None
    error: str | None = None
    error_type: str | None = None


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


_STOP, _RESCAN = "stop", "rescan"


@dataclass
class Fleet:
    """The daemons of DIR's workspaces in one process, and their one HTTP side."""

    directory: Path
    job: Job
    shard: Shard = Shard()
    listen: str | None = None
    load: Callable[[Path | None], Settings] = load_settings
    notifier: Notifier = field(default_factory=Notifier.from_env)
    interval_s: float | None = None
    idle_tick_s: float = 1.0
    members: dict[str, Member] = field(default_factory=dict)
    # The operator's page over every running workspace: its token, as [daemon] names it
    # for one workspace (console_token_file / _env), given to the process by flags.
    console: DaemonSettings | None = None
    max_runs: int = field(default_factory=default_size)  # --max-runs

    def __post_init__(self) -> None:
        self._commands: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._guard = threading.Lock()  # members, between the main loop and HTTP threads
        self._endpoint: Endpoint | None = None
        self._stopping = False
        self.slots = RunSlots(self.max_runs)

    # commands: safe from signal handlers and other threads
    def request_stop(self) -> None:
        self._commands.put(_STOP)

    def request_rescan(self) -> None:
        self._commands.put(_RESCAN)

    @property
    def url(self) -> str | None:
        return self._endpoint.url if self._endpoint is not None else None

    def start(self) -> None:
        """Start every workspace (a broken one is named, the rest start), then the HTTP side."""
        found = workspace_files(self.directory, self.shard)
        self._start_all(found)
        if self.listen:
            from skuferry.service.console.app import page  # jinja2: when a page is served

            self._endpoint = Endpoint(
                self.listen,
                self,
                [("/hooks/<name>/<verb>", self.hook)],
                limits=Limits(max_body_bytes=hooks_http.MAX_BODY_BYTES),
                console=page(self.console or DaemonSettings(), self.running, slots=self.slots),
            ).start()
            log.info("fleet.listen.started", url=self._endpoint.url)  # as before the one side
        running = sum(1 for m in self.members.values() if m.daemon is not None)
        log.info(
            "fleet.started",
            workspaces=len(self.members),
            running=running,
            failed=sorted(n for n, m in self.members.items() if m.daemon is None),
            shard=str(self.shard),
            max_runs=self.slots.size,
        )
        self.notifier.ready(f"{running} of {len(self.members)} workspace(s) running")

    def _start_all(self, found: Mapping[str, Path]) -> None:
        """Start ``found`` side by side: one slow to open its state delays no other. Their
        first runs all come due now; the pool lets ``max_runs`` go at once, in name order."""
        if not found:
            return
        threads = min(len(found), START_THREADS)
        with ThreadPoolExecutor(threads, thread_name_prefix="skuferry-start") as pool:
            started = list(pool.map(lambda item: self._start_member(*item), found.items()))
        with self._guard:
            for member in started:
                self.members[member.name] = member

    def _start_member(self, name: str, path: Path) -> Member:
        member = Member(name, path, _stamp(path))
        daemon = Daemon(
            path,
            job=self.job,
            load=lambda p: load_workspace(name, p, self.load),
            notifier=Notifier(None),  # the process tells systemd, not each workspace
            interval_s=self.interval_s,
            idle_tick_s=self.idle_tick_s,
            http=False,  # the process's one HTTP side serves every workspace
            name=name,
            slots=self.slots,
        )
        try:
            with structlog.contextvars.bound_contextvars(workspace=name):
                daemon.start()
        except Exception as exc:  # noqa: BLE001 - named under the workspace, the rest go on
            daemon.release_lock()
            member.error, member.error_type = describe(exc).one_line(), type(exc).__name__
            log.error("fleet.workspace.failed", workspace=name, error=member.error)
            return member
        try:
            if self.listen:
                daemon.board.seed(daemon.settings.metrics.textfile)
                secret = hooks_http.load_secret(daemon.settings.daemon)
                member.desk = daemon.hook_desk(secret) if secret is not None else None
        except errors.SkuferryError as exc:
            daemon.shutdown()
            member.error, member.error_type = describe(exc).one_line(), type(exc).__name__
            log.error("fleet.workspace.failed", workspace=name, error=member.error)
            return member
        if daemon.settings.daemon.listen:
            log.info(  # the process serves one address for all (--listen)
                "fleet.workspace.listen_unused",
                workspace=name,
                listen=daemon.settings.daemon.listen,
            )
        member.daemon = daemon
        member.thread = threading.Thread(
            target=self._serve_member, args=(name, daemon), name=f"skuferry-{name}", daemon=True
        )
        member.thread.start()
        log.info("fleet.workspace.started", workspace=name, next_run=daemon.next_run())
        return member

    @staticmethod
    def _serve_member(name: str, daemon: Daemon) -> None:
        with structlog.contextvars.bound_contextvars(workspace=name):
            daemon.serve_forever()

    def serve_forever(self) -> int:
        """Wait for commands until a stop; feed the watchdog meanwhile."""
        while True:
            try:
                command = self._commands.get(timeout=self.idle_tick_s)
            except queue.Empty:
                self.notifier.keepalive()
                continue
            if command == _STOP:
                return self.shutdown()
            self.rescan()

    def rescan(self) -> None:
        """SIGHUP: start added workspaces, reload changed ones, stop removed ones.

        A workspace that failed to start is tried again, changed or not (its key or its
        state's lock may have been the trouble).
        """
        found = workspace_files(self.directory, self.shard)
        with self._guard:
            current = dict(self.members)
        removed = [m for name, m in current.items() if name not in found]
        added = {n: p for n, p in found.items() if n not in current or current[n].daemon is None}
        changed = [
            m
            for name, m in current.items()
            if name in found and m.daemon is not None and _stamp(found[name]) != m.stamp
        ]
        with self._guard:  # first: a stopping workspace is no reason for /livez to fail
            for member in removed:
                del self.members[member.name]
        self._stop_members(removed)
        for member in changed:
            member.stamp = _stamp(member.path)
            if member.daemon is not None:
                member.daemon.request_reload()  # a bad new file keeps the old config
        self._start_all(added)
        log.info(
            "fleet.rescan.done",
            added=sorted(added),
            changed=sorted(m.name for m in changed),
            removed=sorted(m.name for m in removed),
        )
        self.notifier.ready(f"{len(found)} workspace(s) after reload")

    def _stop_members(self, members: list[Member]) -> None:
        for member in members:
            if member.daemon is not None:
                member.daemon.request_stop()
        deadline = time.monotonic() + JOIN_S
        for member in members:
            if member.thread is not None:
                member.thread.join(max(0.0, deadline - time.monotonic()))
            log.info("fleet.workspace.stopped", workspace=member.name)

    def shutdown(self) -> int:
        self._stopping = True
        self.notifier.stopping()
        with self._guard:
            members = list(self.members.values())
        self._stop_members(members)
        if self._endpoint is not None:
            self._endpoint.stop()
        log.info("fleet.stopped", workspaces=len(members))
        return 0

    # --- what the HTTP side reports --------------------------------------------------

    def running(self) -> dict[str, Daemon]:
        with self._guard:
            return {n: m.daemon for n, m in sorted(self.members.items()) if m.daemon is not None}

    def liveness(self) -> tuple[int, dict[str, Any]]:
        """200 while the process and every workspace's schedule live, whatever runs did."""
        if self._stopping:
            return 503, {"status": "dead", "problems": ["the process is stopping"]}
        dead = {}
        for name, daemon in self.running().items():
            status, body = daemon.board.liveness()
            if status != 200:
                dead[name] = body["problems"]
        if dead:
            return 503, {"status": "dead", "problems": dead}
        return 200, {"status": "alive", "problems": {}}

    def health(self) -> tuple[int, dict[str, Any]]:
        """200 while no workspace's last run failed; else 503 naming them (no messages).
        Workspaces on an older config (a failed reload) and runs waiting for a slot are
        named too, and fail nothing."""
        with self._guard:
            members = dict(sorted(self.members.items()))
        workspaces: dict[str, Any] = {}
        for name, member in members.items():
            if member.daemon is None:
                workspaces[name] = {
                    "status": "failing",
                    "problems": [f"the workspace did not start ({member.error_type})"],
                }
            else:
                workspaces[name] = member.daemon.board.health()[1]
        failing = sorted(n for n, body in workspaces.items() if body["status"] == "failing")
        degraded = sorted(n for n, body in workspaces.items() if body["status"] == "degraded")
        waiting = self.slots.waiting()
        body = {
            "status": "failing" if failing else "degraded" if degraded else "ok",
            "failing": failing,
            "degraded": degraded,
            "runs": {
                "slots": self.slots.size,
                "running": self.slots.running(),
                "waiting": len(waiting),
            },
            "late": sorted(waiting),
            "workspaces": workspaces,
        }
        return (503 if failing else 200), body

    def metrics_text(self) -> str:
        """Every workspace's families (each sample with its ``workspace`` label) and the
        pool's, in one exposition rendered once."""
        parts = [daemon.board.families() for daemon in self.running().values()]
        pool = metrics.pool_families(
            slots=self.slots.size,
            running=self.slots.running(),
            waiting=self.slots.waiting_count(),
        )
        return metrics.exposition(*parts, pool)

    def hook(self, request: Request) -> Response:
        name, verb = request.params["name"], request.params["verb"]
        with self._guard:
            member = self.members.get(name)
        if member is None or member.daemon is None or verb not in ("sync", "run"):
            return Response.json(404, {"error": "no such workspace hook"})
        if member.desk is None:
            return Response.json(404, {"error": "this workspace has no hook secret"})
        with structlog.contextvars.bound_contextvars(workspace=name):
            return hook_answer(member.desk, f"/hooks/{verb}", request)


def serve(
    directory: Path,
    *,
    shard: Shard = Shard(),
    listen: str | None = None,
    console: DaemonSettings | None = None,
    max_runs: int | None = None,
    job: Job | None = None,
    install_signals: bool = True,
) -> int:
    """Run the fleet until SIGTERM/SIGINT; 0 on a clean stop."""
    if job is None:
        from skuferry.sync.engine import run_once  # the whole sync stack, when used

        job = run_once
    fleet = Fleet(
        directory,
        job,
        shard=shard,
        listen=listen,
        console=console,
        max_runs=max_runs or default_size(),
    )
    with stop_and_reload_on_signals(
        fleet.request_stop, fleet.request_rescan, install=install_signals
    ):
        try:
            fleet.start()
        except BaseException:
            fleet.shutdown()
            raise
        return fleet.serve_forever()
