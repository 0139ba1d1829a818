"""The page's product and run pages: a product's story, what a run changed, and its undo.

``GET /workspaces/<name>/products/<key>`` tells the story ``skuferry explain`` tells
(``service.story``), read when asked, one at a time in the process; ``GET
/workspaces/<name>/products?key=K`` is the search box's (and the one for a key holding a
``/``, which cannot be one path segment). ``GET /workspaces/<name>/runs/<id>`` lists what
the run wrote, filtered (key, kind, outcome) and paged by key in SQLite, as the refused list
is. Signed in, ``POST /workspaces/<name>/runs/<id>/undo`` first shows the undo's dry run
(the first ``PREVIEW`` products, each read on the CMS) and asks to confirm; confirmed
(``confirm=1``), the daemon carries the undo out in its own thread, as a run of its own.
A POST is refused (401, 403) before anything is read from its form and changes nothing,
as every action of the page.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from skuferry import canonical, logs
from skuferry.errors import SkuferryError
from skuferry.service import story as stories
from skuferry.service.console.workspace import Workspace
from skuferry.service.http_app import Request, Response, Router
from skuferry.state import history
from skuferry.state.mirror import Mirror

log = logs.get("skuferry.service.console.app")

PAGE = 50  # writes listed per page of a run
PREVIEW = 100  # products an undo's preview reads on the CMS
KINDS = ("create", "update", "restore", "archive")
_ONE_AT_A_TIME = threading.Lock()  # a story reads the source, a preview the CMS: one at a time


class BusyError(Exception):
    """Another story or preview is being read."""


class Console(Protocol):
    """What these pages use of the page they are mounted beside (``app.Console``)."""

    def add_filters(self, **filters: Callable[..., Any]) -> None: ...

    def find(self, name: str) -> Workspace | None: ...

    def target(self, request: Request) -> Workspace | Response: ...

    def message(self, request: Request, status: int, title: str, text: str) -> Response: ...

    def refuse(self, request: Request, status: int, why: str) -> Response: ...

    def page(
        self, template: str, request: Request, *, status: int = ..., **context: Any
    ) -> Response: ...

    def query_of(self, request: Request) -> dict[str, list[str]] | Response: ...

    def form_of(self, request: Request) -> dict[str, list[str]]: ...

    def is_script(self, request: Request) -> bool: ...

    def see_other(self, location: str) -> Response: ...


def product_href(workspace: str, key: str) -> str:
    """The product page's address; a key holding ``/`` goes as the search box's query."""
    base = f"/workspaces/{quote(workspace, safe='')}/products"
    return f"{base}?{urlencode({'key': key})}" if "/" in key else f"{base}/{quote(key, safe='')}"


def run_href(workspace: str, run: int | None) -> str:
    return f"/workspaces/{quote(workspace, safe='')}/runs/{run}"


def shown(value: Any) -> str:
    """A field's value on the page (strings as they are, null as a dash)."""
    if value is None:
        return "—"
    return value if isinstance(value, str) else canonical.dumps(value)


class StoryPages:
    """The product, run and undo routes of ``console`` (its sign-in, CSRF and rendering)."""

    def __init__(self, console: Console) -> None:
        self._console = console
        console.add_filters(product_href=product_href, run_href=run_href, shown=shown)

    def mount(self, router: Router) -> Router:
        router.add("GET", "/workspaces/<name>/products", self.find)
        router.add("GET", "/workspaces/<name>/products/<key>", self.product)
        router.add("GET", "/workspaces/<name>/runs/<run>", self.run)
        router.add("POST", "/workspaces/<name>/runs/<run>/undo", self.undo)
        return router

    # -- a product's story --------------------------------------------------------------

    def find(self, request: Request) -> Response:
        """The search box: ``?key=K``."""
        query = self._console.query_of(request)
        if isinstance(query, Response):
            return query
        key = (query.get("key") or [""])[0].strip()
        if not key:
            return self._console.message(request, 400, "No key", "Type a product's key.")
        return self._story(request, key)

    def product(self, request: Request) -> Response:
        return self._story(request, _utf8(request.params["key"]))

    def _story(self, request: Request, key: str) -> Response:
        console = self._console
        ws = console.find(request.params["name"])
        if ws is None:
            return console.message(request, 404, "No such workspace", "This process serves none.")
        try:
            found = _one_at_a_time(lambda: stories.tell(ws.settings, key))
        except BusyError:
            return console.message(
                request, 503, "Busy", "Another product's story is being read; try again."
            )
        except SkuferryError as exc:
            return console.message(request, 503, "Not readable now", str(exc))
        return console.page(
            "product.html",
            request,
            title=f"{found.key} · {ws.name} · skuferry",
            ws_name=ws.name,
            story=found,
            stamp=stories.stamp,
            status=200 if found.known else 404,
        )

    # -- a run --------------------------------------------------------------------------

    def run(self, request: Request) -> Response:
        console = self._console
        ws = console.find(request.params["name"])
        run = _run_id(request)
        if ws is None or run is None:
            return console.message(request, 404, "Not found", "No such workspace or run.")
        query = console.query_of(request)
        if isinstance(query, Response):
            return query
        text = (query.get("q") or [""])[0][:200]
        kind = (query.get("kind") or [""])[0]
        kind = kind if kind in KINDS else ""
        outcome = (query.get("outcome") or [""])[0]
        outcome = outcome if outcome in history.OUTCOMES else ""
        after = (query.get("after") or [""])[0] or None
        facts = _run_facts(ws, run, text=text, kind=kind, outcome=outcome, after=after)
        if facts is None:
            return console.message(request, 404, "No such run", f"The state holds no run {run}.")
        notice = ""
        if (query.get("undo") or [""])[0]:
            notice = (
                "The undo was handed to the daemon: it runs after the run going, if any. "
                "Reload to see it among the undos below."
            )
        return console.page(
            "run.html",
            request,
            title=f"run {run} · {ws.name} · skuferry",
            ws_name=ws.name,
            run=facts,
            kinds=KINDS,
            outcomes=history.OUTCOMES,
            here={"q": text, "kind": kind, "outcome": outcome},
            problem=ws.undo_problem(run) or "",
            notice=notice,
        )

    def undo(self, request: Request) -> Response:
        console = self._console
        ws = console.target(request)  # signed in, CSRF checked: nothing read before
        if isinstance(ws, Response):
            return ws
        run = _run_id(request)
        if run is None:
            return console.refuse(request, 404, "no such run")
        form = console.form_of(request)
        if (form.get("confirm") or [""])[0] == "1":
            ws.undo(run)
            log.info("console.undo", workspace=ws.name, undoes=run, peer=request.peer)
            if console.is_script(request):
                return Response.json(202, {"queued": "undo", "undoes": run, "workspace": ws.name})
            return console.see_other(run_href(ws.name, run) + "?undo=asked")
        return self._preview(request, ws, run)

    def _preview(self, request: Request, ws: Workspace, run: int) -> Response:
        """The undo's dry run over the first ``PREVIEW`` products, and the confirm form."""
        from skuferry.sync.undo import undo_run  # the client's imports: only when asked

        console = self._console
        facts = _run_facts(ws, run, limit=PREVIEW)
        if facts is None:
            return console.refuse(request, 404, f"the state holds no run {run}")
        keys = tuple(e.key for e in facts["writes"])
        try:
            report = _one_at_a_time(
                lambda: undo_run(ws.settings, run, dry_run=True, only=keys or None)
            )
        except BusyError:
            return console.message(request, 503, "Busy", "Another preview is being read.")
        except SkuferryError as exc:
            return console.message(request, 409, "This run cannot be undone", str(exc))
        return console.page(
            "undo.html",
            request,
            title=f"undo run {run} · {ws.name} · skuferry",
            ws_name=ws.name,
            run=facts,
            preview=report.as_json(),
            partial=facts["products"] > len(keys),
        )


def _one_at_a_time(read: Any) -> Any:
    if not _ONE_AT_A_TIME.acquire(blocking=False):
        raise BusyError
    try:
        return read()
    finally:
        _ONE_AT_A_TIME.release()


def _utf8(segment: str) -> str:
    """A path segment as the server decoded it (WSGI: Latin-1), back to the UTF-8 typed."""
    try:
        return segment.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return segment


def _run_id(request: Request) -> int | None:
    text = request.params.get("run", "")
    return int(text) if text.isascii() and text.isdigit() and len(text) < 12 else None


def _run_facts(
    ws: Workspace,
    run: int,
    *,
    text: str = "",
    kind: str = "",
    outcome: str = "",
    after: str | None = None,
    limit: int = PAGE,
) -> dict[str, Any] | None:
    """The run's row, its counts, its undos and one page of its writes (by key)."""
    path = ws.settings.state.path
    if not path.exists():
        return None
    mirror = Mirror(path, readonly=True)
    try:
        row = mirror.run_row(run)
        if row is None:
            return None
        counts = mirror.run_counts(run)
        writes = mirror.run_page(
            run, after=after, search=text, kind=kind, outcome=outcome, limit=limit + 1
        )
        products = mirror.run_products(run)
        return {
            **row,
            "counts": counts,
            "writes": writes[:limit],
            "more": writes[limit - 1].key if len(writes) > limit else None,
            "after": after,
            "products": products,
            "undos": mirror.undos_of(run),
            "pruned": run <= mirror.history_pruned_through(),
        }
    finally:
        mirror.close()
