"""The operator's page: routes on the daemon's ``listen`` address, rendered with Jinja2.

``GET /`` lists the workspaces the process serves, ``GET /workspaces/<name>`` shows one
(refused products with a filter, recent runs and their chart, pending work, one product's
planned change on request). A signed-in operator may also ``POST`` to
``/workspaces/<name>/retry`` (send refused products again, as ``skuferry retry`` does) and
``/workspaces/<name>/run`` (a run now, as ``POST /hooks/run``). Every page works without
JavaScript, loads nothing from elsewhere, and is sent with a Content-Security-Policy that
allows neither scripts nor inline styles.

A POST is refused (401 without a valid session or bearer token, 403 with a wrong CSRF
token or with no console token configured) before anything is read from its form, and
changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from http.cookies import CookieError, SimpleCookie
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote

import jinja2

from skuferry import canonical, logs
from skuferry.config.schema import DaemonSettings
from skuferry.errors import SkuferryError
from skuferry.models import STAGES
from skuferry.service.console import auth, chart, planned, views
from skuferry.service.console.auth import Gate, Session
from skuferry.service.console.workspace import Daemon, DaemonWorkspace, Workspace
from skuferry.service.http_app import Request, Response, Router

if TYPE_CHECKING:
    from skuferry.service.run_slots import RunSlots

log = logs.get(__name__)

HTML = "text/html; charset=utf-8"
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = (
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
    ("Permissions-Policy", "camera=(), microphone=(), geolocation=()"),
)
MAX_KEYS = 1000  # per retry form
MAX_FILTER_CHARS = 200
MAX_QUERY_FIELDS = 20  # a page's query has a handful; more is refused (400)
MAX_OFFSET = 1_000_000_000  # far past any list of refused products, well inside SQLite's int
REFRESH_INDEX_S = 60  # the front page reloads itself this often (no script)
REFRESH_RUNNING_S = 10  # ... and a workspace's page while a run is in flight

Workspaces = Callable[[], Sequence[Workspace]]


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who is looking: a session (a person), a bearer token (a script), or nobody."""

    session: Session | None
    bearer: bool

    @property
    def signed_in(self) -> bool:
        return self.session is not None or self.bearer

    @property
    def csrf(self) -> str:
        return self.session.csrf if self.session is not None else ""


class BadQueryError(ValueError):
    """A query the page cannot answer: refused with 400 and these words."""


class Console:
    """The page's routes over ``workspaces`` (called per request: the list may change)."""

    def __init__(
        self,
        workspaces: Workspaces,
        gate: Gate,
        *,
        wall_clock: Callable[[], float] = time.time,
        slots: RunSlots | None = None,
    ) -> None:
        self._workspaces = workspaces
        self._gate = gate
        self._brake = auth.Brake()
        self._wall_clock = wall_clock
        self._slots = slots  # a fleet's pool of runs: the front page says who waits
        self._env = jinja2.Environment(
            loader=jinja2.PackageLoader("skuferry.service.console", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self._env.filters["ago"] = ago
        self._env.filters["when"] = when
        self._env.filters["due"] = lambda iso: due(iso, self._wall_clock())
        self._env.filters["count"] = lambda n: f"{n:,}"
        self._css = (resources.files(__package__) / "static" / "console.css").read_bytes()

    @classmethod
    def of(
        cls, daemon: DaemonSettings, workspaces: Workspaces, *, slots: RunSlots | None = None
    ) -> Console:
        """The page for ``workspaces``, its token from ``[daemon]``. Raises ConfigError."""
        return cls(workspaces, Gate(auth.load_token(daemon)), slots=slots)

    def mount(self, router: Router) -> Router:
        router.add("GET", "/", self.index)
        router.add("GET", "/console.css", self.css)
        router.add("GET", "/login", self.login_form)
        router.add("POST", "/login", self.login)
        router.add("POST", "/logout", self.logout)
        router.add("GET", "/workspaces/<name>", self.workspace)
        router.add("POST", "/workspaces/<name>/retry", self.retry)
        router.add("POST", "/workspaces/<name>/run", self.run)
        from skuferry.service.console.story import StoryPages  # products, runs, undo

        return StoryPages(self).mount(router)

    # -- for the pages mounted beside these (``console.story``) ----------------------------

    def add_filters(self, **filters: Callable[..., Any]) -> None:
        self._env.filters.update(filters)

    def find(self, name: str) -> Workspace | None:
        return self._find(name)

    def target(self, request: Request) -> Workspace | Response:
        """The workspace a POST acts on, or the refusal (nothing has been done)."""
        return self._target(request)

    def message(self, request: Request, status: int, title: str, text: str) -> Response:
        return self._message(request, status, title, text)

    def refuse(self, request: Request, status: int, why: str) -> Response:
        return self._refuse(request, status, why)

    def page(
        self, template: str, request: Request, *, status: int = 200, **context: Any
    ) -> Response:
        return self._page(template, self._viewer(request), status=status, **context)

    def query_of(self, request: Request) -> dict[str, list[str]] | Response:
        """The page's query, or the answer to a bad one."""
        try:
            return _query(request.query)
        except BadQueryError as exc:
            return self._bad_query(request, exc)

    @staticmethod
    def form_of(request: Request) -> dict[str, list[str]]:
        return _form(request)

    @staticmethod
    def is_script(request: Request) -> bool:
        return _is_script(request)

    @staticmethod
    def see_other(location: str) -> Response:
        return _see_other(location)

    # -- pages ------------------------------------------------------------------------

    def index(self, request: Request) -> Response:
        try:
            query = _query(request.query)
        except BadQueryError as exc:
            return self._bad_query(request, exc)
        viewer = self._viewer(request)
        now = self._wall_clock()
        rows = sorted(
            (views.overview(ws, wall_clock=now) for ws in self._workspaces()),
            key=lambda o: o.rank,
        )
        text = _one(query, "q")[:MAX_FILTER_CHARS].strip()
        state = _one(query, "state")
        state = state if state in views.STATES else ""
        shown = [
            o
            for o in rows
            if text.casefold() in o.name.casefold() and (not state or o.state == state)
        ]
        slots = self._slots
        runs = (
            None
            if slots is None
            else {"slots": slots.size, "running": slots.running(), "waiting": slots.waiting_count()}
        )
        return self._page(
            "index.html",
            viewer,
            overviews=shown,
            totals=views.Totals.of(rows),
            states=views.STATES,
            here={"q": text, "state": state},
            title="skuferry",
            refresh=REFRESH_INDEX_S,
            runs=runs,
            degraded=[o for o in rows if o.degraded is not None],
        )

    def workspace(self, request: Request) -> Response:
        ws = self._find(request.params["name"])
        if ws is None:
            return self._message(
                request, 404, "No such workspace", "This process serves none by that name."
            )
        try:
            query = _query(request.query)
            offset = _offset(_one(query, "offset"))
        except BadQueryError as exc:
            return self._bad_query(request, exc)
        viewer = self._viewer(request)
        text = _one(query, "q")[:MAX_FILTER_CHARS]
        stage = _one(query, "stage")
        stage = stage if stage in STAGES else ""
        want = _one(query, "plan").strip()
        plan: planned.Planned | None = None
        plan_problem = ""
        if want:
            try:
                plan = planned.plan_one(ws.settings, want)
            except planned.BusyError:
                plan_problem = "another plan is being computed; try again in a moment"
            except SkuferryError as exc:
                plan_problem = f"the source could not be read: {exc}"
        runs = views.recent_runs(ws)
        head = views.overview(ws, wall_clock=self._wall_clock())
        return self._page(
            "workspace.html",
            viewer,
            title=f"{ws.name} · skuferry",
            ws=head,
            refresh=REFRESH_RUNNING_S if head.state == "running" and not want else None,
            refused=views.refused(ws, text=text, stage=stage, offset=offset),
            stages=STAGES,
            runs=runs,
            chart=chart.runs_svg(runs),
            plan=plan,
            plan_key=want,
            plan_problem=plan_problem,
            notice=_notice(query),
            here=_here(ws.name, text, stage, offset),
        )

    def css(self, _request: Request) -> Response:
        return Response(200, self._css, "text/css; charset=utf-8", SECURITY_HEADERS)

    # -- signing in -------------------------------------------------------------------

    def login_form(self, request: Request, *, status: int = 200, problem: str = "") -> Response:
        if not self._gate.enabled:
            return self._message(
                request,
                404,
                "Sign-in is off",
                "No console token is configured ([daemon] console_token_file or "
                "console_token_env): this page is read-only.",
            )
        nonce = auth.new_login_nonce()
        page = self._page(
            "login.html",
            self._viewer(request),
            title="Sign in · skuferry",
            nonce=nonce,
            problem=problem,
            status=status,
        )
        cookie = _cookie(auth.LOGIN_COOKIE, nonce, max_age=600, path="/login")
        return _with_headers(page, ("Set-Cookie", cookie))

    def login(self, request: Request) -> Response:
        if not self._gate.enabled:
            return self._refuse(request, 403, "sign-in is off: no console token is configured")
        wait = self._brake.wait_s(request.peer)
        if wait:
            refused = self._refuse(
                request,
                429,
                f"too many wrong tokens from this address: try again in {wait} s",
            )
            return _with_headers(refused, ("Retry-After", str(wait)))
        form = _form(request)
        nonce = _cookies(request).get(auth.LOGIN_COOKIE, "")
        given = _one(form, "nonce")
        if not auth.nonce_matches(nonce, given):
            log.warning("console.login.refused", peer=request.peer, why="stale form")
            return self.login_form(request, status=403, problem="The form expired; sign in again.")
        if not self._gate.token_matches(_one(form, "token")):
            log.warning("console.login.refused", peer=request.peer, why="wrong token")
            if self._brake.failed(request.peer):
                log.warning(
                    "console.login.braked",
                    peer=request.peer,
                    failures=auth.BRAKE_FAILURES,
                    window_s=auth.BRAKE_WINDOW_S,
                )
            return self.login_form(request, status=401, problem="That is not the console token.")
        self._brake.passed(request.peer)
        session_id, _session = self._gate.open()
        log.info("console.login", peer=request.peer)
        return Response(
            303,
            b"",
            HTML,
            (
                ("Location", "/"),
                (
                    "Set-Cookie",
                    _cookie(auth.SESSION_COOKIE, session_id, max_age=int(self._gate.ttl_s)),
                ),
                ("Set-Cookie", _cookie(auth.LOGIN_COOKIE, "", max_age=0, path="/login")),
                *SECURITY_HEADERS,
            ),
        )

    def logout(self, request: Request) -> Response:
        refused = self._authorize(request)
        if refused is not None:
            return refused
        self._gate.close(_cookies(request).get(auth.SESSION_COOKIE))
        return Response(
            303,
            b"",
            HTML,
            (
                ("Location", "/"),
                ("Set-Cookie", _cookie(auth.SESSION_COOKIE, "", max_age=0)),
                *SECURITY_HEADERS,
            ),
        )

    # -- actions ----------------------------------------------------------------------

    def retry(self, request: Request) -> Response:
        ws = self._target(request)
        if isinstance(ws, Response):
            return ws
        form = _form(request)
        keys = list(dict.fromkeys(k for k in map(canonical.key, form.get("key", [])) if k))
        if not keys or len(keys) > MAX_KEYS:
            return self._refuse(request, 400, f"name between 1 and {MAX_KEYS} keys")
        ws.retry(keys)
        log.info("console.retry", workspace=ws.name, keys=len(keys), peer=request.peer)
        if _is_script(request):
            return Response.json(202, {"queued": len(keys), "workspace": ws.name})
        shown = keys[0] if len(keys) == 1 else f"{len(keys)} products"
        return _see_other(f"/workspaces/{quote(ws.name)}?sent={quote(shown)}")

    def run(self, request: Request) -> Response:
        ws = self._target(request)
        if isinstance(ws, Response):
            return ws
        ws.run_now()
        log.info("console.run", workspace=ws.name, peer=request.peer)
        if _is_script(request):
            return Response.json(202, {"queued": "run", "workspace": ws.name})
        return _see_other(f"/workspaces/{quote(ws.name)}?ran=1")

    # -- helpers ----------------------------------------------------------------------

    def _target(self, request: Request) -> Workspace | Response:
        """The workspace a POST acts on, or the refusal (nothing has been done)."""
        refused = self._authorize(request)
        if refused is not None:
            return refused
        ws = self._find(request.params["name"])
        return ws if ws is not None else self._refuse(request, 404, "no such workspace")

    def _find(self, name: str) -> Workspace | None:
        return next((ws for ws in self._workspaces() if ws.name == name), None)

    def _viewer(self, request: Request) -> Viewer:
        authorization = request.headers.get("authorization", "")
        bearer = bool(authorization) and self._gate.bearer(authorization)
        return Viewer(self._gate.session(_cookies(request).get(auth.SESSION_COOKIE)), bearer)

    def _authorize(self, request: Request) -> Response | None:
        """None when the POST may act; else the refusal (nothing has been done)."""
        if not self._gate.enabled:
            return self._refuse(request, 403, "actions are off: no console token is configured")
        authorization = request.headers.get("authorization")
        if authorization is not None:
            if self._gate.bearer(authorization):
                return None
            log.warning(
                "console.action.refused", path=request.path, peer=request.peer, why="bad bearer"
            )
            return self._refuse(request, 401, "the bearer token is not the console token")
        session = self._gate.session(_cookies(request).get(auth.SESSION_COOKIE))
        if session is None:
            log.warning(
                "console.action.refused", path=request.path, peer=request.peer, why="no session"
            )
            return self._refuse(request, 401, "sign in first")
        if not auth.csrf_matches(session, _one(_form(request), "csrf")):
            log.warning("console.action.refused", path=request.path, peer=request.peer, why="csrf")
            return self._refuse(
                request, 403, "the form's CSRF token is missing or wrong; reload the page"
            )
        return None

    def _bad_query(self, request: Request, exc: BadQueryError) -> Response:
        log.warning("console.query.refused", path=request.path, peer=request.peer, why=str(exc))
        return self._refuse(request, 400, str(exc))

    def _refuse(self, request: Request, status: int, why: str) -> Response:
        if _is_script(request):
            return _with_headers(Response.json(status, {"error": why}), *SECURITY_HEADERS)
        return self._message(request, status, "Refused", why)

    def _message(self, request: Request, status: int, title: str, text: str) -> Response:
        return self._page(
            "message.html",
            self._viewer(request),
            title=title,
            heading=title,
            text=text,
            status=status,
        )

    def _page(
        self,
        template: str,
        viewer: Viewer,
        *,
        status: int = 200,
        refresh: int | None = None,
        **context: Any,
    ) -> Response:
        body = self._env.get_template(template).render(
            viewer=viewer,
            actions=self._gate.enabled,
            refresh=refresh,
            rendered_at=when(self._wall_clock()),
            **context,
        )
        return Response(status, body.encode(), HTML, SECURITY_HEADERS)


def page(
    settings: DaemonSettings,
    daemons: Callable[[], Mapping[str, Daemon]],
    *,
    slots: RunSlots | None = None,
) -> Callable[[Router], object]:
    """The page over ``daemons`` (``{name: daemon}``, asked per request: a fleet's may
    change), its token from ``settings``, and a fleet's pool of runs: what the daemon's
    and the fleet's HTTP sides both mount (``Endpoint(console=...)``)."""

    def workspaces() -> list[DaemonWorkspace]:
        return [DaemonWorkspace(daemon, name) for name, daemon in daemons().items()]

    return Console.of(settings, workspaces, slots=slots).mount


def ago(seconds: float | None) -> str:
    """``seconds`` as a person says it: ``42 s``, ``5 min``, ``3 h 10 min``, ``2 d 4 h``."""
    if seconds is None:
        return "never"
    s = int(seconds)
    if s < 120:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def when(unix: float | None) -> str:
    if unix is None:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(unix))


def due(iso: str | None, now: float) -> str:
    """A next run's ISO 8601 time as local time and how far off it is."""
    if not iso:
        return "none scheduled"
    try:
        at = datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return iso
    left = at - now
    return f"{when(at)} ({'in ' + ago(left) if left > 0 else 'due now'})"


def _notice(query: dict[str, list[str]]) -> str:
    sent = _one(query, "sent")
    if sent:
        return (
            f"{sent}: handed to the daemon, sent again in a targeted run within seconds "
            "(after the run going, if any). Reload to see the outcome."
        )
    if _one(query, "ran"):
        return "A run was asked for: it starts as soon as no run is going."
    return ""


def _here(name: str, text: str, stage: str, offset: int) -> dict[str, Any]:
    return {"name": name, "q": text, "stage": stage, "offset": offset}


def _one(values: dict[str, list[str]], name: str) -> str:
    found = values.get(name)
    return found[0] if found else ""


def _query(text: str) -> dict[str, list[str]]:
    """A page's query string. Raises ``BadQueryError`` past ``MAX_QUERY_FIELDS`` fields."""
    try:
        return parse_qs(text, max_num_fields=MAX_QUERY_FIELDS)
    except ValueError:  # parse_qs: "Max number of fields exceeded"
        raise BadQueryError(f"too many query fields (at most {MAX_QUERY_FIELDS})") from None


def _offset(text: str) -> int:
    """``offset=``: 0 to ``MAX_OFFSET`` in ASCII digits (``str.isdigit`` alone takes ``²``,
    which ``int`` refuses). Raises ``BadQueryError``."""
    if not text:
        return 0
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_OFFSET:
        raise BadQueryError(f"offset must be a whole number from 0 to {MAX_OFFSET:,}")
    return int(text)


def _form(request: Request) -> dict[str, list[str]]:
    try:
        text = request.body.decode("utf-8")
    except UnicodeDecodeError:
        return {}
    try:
        return parse_qs(text, max_num_fields=MAX_KEYS + 10)
    except ValueError:  # too many fields
        return {}


def _cookies(request: Request) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(request.headers.get("cookie", ""))
    except CookieError:
        return {}
    return {name: morsel.value for name, morsel in jar.items()}


def _cookie(name: str, value: str, *, max_age: int, path: str = "/") -> str:
    return f"{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Strict"


def _is_script(request: Request) -> bool:
    """A script's request (bearer token or JSON wanted): answered in JSON, not HTML."""
    return "authorization" in request.headers or "application/json" in request.headers.get(
        "accept", ""
    )


def _see_other(location: str) -> Response:
    return Response(303, b"", HTML, (("Location", location), *SECURITY_HEADERS))


def _with_headers(response: Response, *headers: tuple[str, str]) -> Response:
    return Response(
        response.status, response.body, response.content_type, (*response.headers, *headers)
    )
