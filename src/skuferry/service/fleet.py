"""Many workspaces in one process: ``skuferry run --workspaces DIR [--shard K/N]``.

``run`` composes one ``Daemon`` per workspace: its own
scheduler, budgets, state lock and run threads, so one never waits for another's
budget, and one that is slow, failing or refused stalls no other. The process
serves one HTTP side for all of them (``--listen``): ``/livez``, ``/healthz``,
``/metrics`` with ``workspace="<name>"`` on every sample, and the hooks routed per
workspace, each checked with that workspace's own secret. SIGHUP re-reads DIR:
an added file starts a workspace, a changed one reloads it, a removed one stops it.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import structlog

from skuferry import errors, logs
from skuferry.config.load import load_settings
from skuferry.config.schema import DaemonSettings, Settings
from skuferry.service import hooks_http
from skuferry.service.daemon import STOP_TIMEOUT_S, Daemon, Job
from skuferry.service.failures import describe
from skuferry.service.http_app import Request, Response, Router
from skuferry.service.http_endpoint import CONTENT_TYPE
from skuferry.service.http_server import HttpServer, Limits
from skuferry.service.notify import Notifier
from skuferry.service.workspaces import Shard, load_workspace, workspace_files

log = logs.get(__name__)

JOIN_S = STOP_TIMEOUT_S + 1.0  # a workspace's daemon stops within its own deadline
# The first runs at start are spread over up to STAGGER_S (STEP_S apart): a hundred
# first runs at once would each hold its rows and pages at the same moment (about 5 MiB
# per 3,000 products), and on a few cores they would not finish sooner anyway.
STAGGER_S, STEP_S = 60.0, 0.5


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


def _named_job(name: str, job: Job) -> Job:
    """``job`` with ``workspace=<name>`` on every log event of its run (its own thread)."""

    def named(*args: Any, **kwargs: Any) -> Any:
        with structlog.contextvars.bound_contextvars(workspace=name):
            return job(*args, **kwargs)

    return named


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

    def __post_init__(self) -> None:
        self._commands: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._guard = threading.Lock()  # members, between the main loop and HTTP threads
        self._server: HttpServer | None = None
        self._stopping = False

    # commands: safe from signal handlers and other threads
    def request_stop(self) -> None:
        self._commands.put(_STOP)

    def request_rescan(self) -> None:
        self._commands.put(_RESCAN)

    @property
    def url(self) -> str | None:
        return self._server.url if self._server is not None else None

    def start(self) -> None:
        """Start every workspace (a broken one is named, the rest start), then the HTTP side."""
        found = workspace_files(self.directory, self.shard)
        self._start_all(found, stagger=True)
        if self.listen:
            router = routes(self)
            self._page().mount(router)
            self._server = HttpServer(
                self.listen,
                router,
                Limits(max_body_bytes=hooks_http.MAX_BODY_BYTES),
            ).start()
            log.info("fleet.listen.started", url=self._server.url)
        running = sum(1 for m in self.members.values() if m.daemon is not None)
        log.info(
            "fleet.started",
            workspaces=len(self.members),
            running=running,
            failed=sorted(n for n, m in self.members.items() if m.daemon is None),
            shard=str(self.shard),
        )
        self.notifier.ready(f"{running} of {len(self.members)} workspace(s) running")

    def _page(self) -> Any:
        """The operator's page (the console) over the workspaces running now."""
        from skuferry.service.console.app import Console
        from skuferry.service.console.workspace import DaemonWorkspace

        def running() -> list[DaemonWorkspace]:
            with self._guard:
                members = sorted(self.members.items())
            return [DaemonWorkspace(m.daemon, name) for name, m in members if m.daemon]

        return Console.of(self.console or DaemonSettings(), running)

    def _start_all(self, found: Mapping[str, Path], *, stagger: bool = False) -> None:
        """Start ``found`` side by side: one slow to open its state delays no other."""
        if not found:
            return
        step = min(STEP_S, STAGGER_S / len(found)) if stagger else 0.0
        with ThreadPoolExecutor(min(len(found), 16), thread_name_prefix="skuferry-start") as pool:
            started = list(
                pool.map(
                    lambda item: self._start_member(item[1][0], item[1][1], item[0] * step),
                    enumerate(found.items()),
                )
            )
        with self._guard:
            for member in started:
                self.members[member.name] = member

    def _start_member(self, name: str, path: Path, delay_s: float = 0.0) -> Member:
        member = Member(name, path, _stamp(path))
        daemon = Daemon(
            path,
            job=_named_job(name, self.job),
            load=lambda p: load_workspace(name, p, self.load),
            notifier=Notifier(None),  # the process tells systemd, not each workspace
            interval_s=self.interval_s,
            idle_tick_s=self.idle_tick_s,
            http=False,  # the process's one HTTP side serves every workspace
            first_run_delay_s=delay_s,
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
        if self._server is not None:
            self._server.stop()
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
        """200 while no workspace's last run failed; else 503 naming them (no messages)."""
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
        failing = sorted(n for n, body in workspaces.items() if body["status"] != "ok")
        body = {
            "status": "failing" if failing else "ok",
            "failing": failing,
            "workspaces": workspaces,
        }
        return (503 if failing else 200), body

    def metrics_text(self) -> bytes:
        """Every workspace's samples, each with its ``workspace`` label, in one exposition."""
        return merge_expositions(daemon.board.metrics_text() for daemon in self.running().values())

    def hook(self, request: Request) -> Response:
        name, verb = request.params["name"], request.params["verb"]
        with self._guard:
            member = self.members.get(name)
        if member is None or member.daemon is None or verb not in ("sync", "run"):
            return Response.json(404, {"error": "no such workspace hook"})
        if member.desk is None:
            return Response.json(404, {"error": "this workspace has no hook secret"})
        length = request.headers.get("content-length", "")
        if not length.isdigit() or int(length) > hooks_http.MAX_BODY_BYTES:
            return Response.json(413, {"error": "send a Content-Length up to 1 MiB"})
        with structlog.contextvars.bound_contextvars(workspace=name):
            return Response.json(
                *member.desk.handle(f"/hooks/{verb}", request.headers, request.body)
            )


def merge_expositions(texts: Iterable[str]) -> bytes:
    """One exposition of many: each family's samples together under one HELP and TYPE.

    Each text is ``generate_latest``'s: a family is its ``# HELP`` and ``# TYPE`` lines,
    then its samples. The same family from two workspaces twice would be an invalid
    exposition (a scraper rejects a second TYPE line for one name).
    """
    heads: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    for text in texts:
        name: str | None = None
        for line in text.splitlines():
            if line.startswith(("# HELP ", "# TYPE ")):
                found = line.split(" ", 3)[2]
                if found != name:
                    name = found
                    heads.setdefault(name, [])
                    samples.setdefault(name, [])
                if len(heads[name]) < 2 and line not in heads[name]:
                    heads[name].append(line)
            elif line and not line.startswith("#") and name is not None:
                samples[name].append(line)
    lines = [line for name in heads for line in (*heads[name], *samples[name])]
    return ("\n".join(lines) + "\n").encode() if lines else b""


def routes(fleet: Fleet) -> Router:
    router = Router(Response.json(404, {"error": "not found; try /metrics or /healthz"}))
    router.add("GET", "/metrics", lambda _r: Response(200, fleet.metrics_text(), CONTENT_TYPE))
    router.add("GET", "/healthz", lambda _r: Response.json(*fleet.health()))
    router.add("GET", "/livez", lambda _r: Response.json(*fleet.liveness()))
    router.add("POST", "/hooks/<name>/<verb>", fleet.hook)
    return router


@contextmanager
def _signals(fleet: Fleet) -> Iterator[None]:
    def on_stop(_signum: int, _frame: FrameType | None) -> None:
        fleet.request_stop()

    def on_hup(_signum: int, _frame: FrameType | None) -> None:
        fleet.request_rescan()

    previous = {
        signum: signal.signal(signum, handler)
        for signum, handler in (
            (signal.SIGTERM, on_stop),
            (signal.SIGINT, on_stop),
            (signal.SIGHUP, on_hup),
        )
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def serve(
    directory: Path,
    *,
    shard: Shard = Shard(),
    listen: str | None = None,
    console: DaemonSettings | None = None,
    job: Job | None = None,
    install_signals: bool = True,
) -> int:
    """Run the fleet until SIGTERM/SIGINT; 0 on a clean stop."""
    if job is None:
        from skuferry.sync.engine import run_once  # the whole sync stack, when used

        job = run_once
    fleet = Fleet(directory, job, shard=shard, listen=listen, console=console)
    if not install_signals:
        fleet.start()
        return fleet.serve_forever()
    with _signals(fleet):
        try:
            fleet.start()
        except BaseException:
            fleet.shutdown()
            raise
        return fleet.serve_forever()
