"""The operator's page as a WSGI application: routes, sign-in, CSRF, CSP, read-only mode,
the refused products' filter, the runs' chart, one product's planned change."""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from structlog.testing import capture_logs

from skuferry.config.schema import Settings
from skuferry.errors import ConfigError
from skuferry.service.console import app as app_mod
from skuferry.service.console import auth, chart, views
from skuferry.service.console.app import Console
from skuferry.service.console.auth import Gate
from skuferry.service.degraded import Degraded
from skuferry.service.http_app import Request, Response, Router
from skuferry.state.mirror import Mirror
from tests.unit.service.test_daemon import make_settings

TOKEN = "console-token-Vb3nQ8xR2mK7"


class FakeWorkspace:
    def __init__(self, settings: Settings, name: str = "shop") -> None:
        self.name = name
        self.settings = settings
        self.board: Any = None
        self.runs = 0
        self.retried: list[list[str]] = []
        self.undone: list[int] = []
        self.problems: dict[int, str] = {}
        self.reload_failed: Degraded | None = None
        self.late_s: float | None = None

    def next_run(self) -> str | None:
        return "2026-11-27T02:00:00+00:00"

    def waiting(self) -> int:
        return 2

    def degraded(self) -> Degraded | None:
        return self.reload_failed

    def waiting_for_slot_s(self) -> float | None:
        return self.late_s

    def run_now(self) -> None:
        self.runs += 1

    def retry(self, keys: Sequence[str]) -> None:
        self.retried.append(list(keys))

    def undo(self, run: int) -> None:
        self.undone.append(run)

    def undo_problem(self, run: int) -> str | None:
        return self.problems.get(run)


def seed_state(path: Path, *, letters: int = 3, runs: int = 4) -> None:
    mirror = Mirror(path)
    try:
        for i in range(runs):
            run = mirror.start_run()
            summary = {
                "created": i,
                "updated": 2 * i,
                "unchanged": 100,
                "rejected": letters,
                "failed": 0,
                "requests": {"read": 3, "write": 3 * i},
                "duration_s": 1.5 + i,
            }
            mirror.finish_run(run, status="partial", exit_code=1, summary=summary)
        refused = [
            (f"SKU-{i:05d}", "map" if i % 2 else "check", f"price {i} is not a decimal", i + 1)
            for i in range(letters)
        ]
        mirror.note_refusals(refused, source="catalog.csv", whole=True)
    finally:
        mirror.close()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    s = make_settings(tmp_path)
    seed_state(s.state.path)
    return s


def app_of(ws: FakeWorkspace, token: str | None = TOKEN) -> Router:
    gate = Gate(token.encode() if token else None)
    return Console(lambda: [ws], gate).mount(Router())


def get(app: Router, path: str, *, cookie: str = "", **headers: str) -> Response:
    path, _, query = path.partition("?")
    hdrs = {k.replace("_", "-").lower(): v for k, v in headers.items()}
    if cookie:
        hdrs["cookie"] = cookie
    return app.answer(Request("GET", path, query, hdrs, b""))


def post(
    app: Router, path: str, form: dict[str, Any], *, cookie: str = "", **headers: str
) -> Response:
    body = urlencode(form, doseq=True).encode()
    hdrs = {k.replace("_", "-").lower(): v for k, v in headers.items()}
    hdrs["content-type"] = "application/x-www-form-urlencoded"
    hdrs["content-length"] = str(len(body))
    if cookie:
        hdrs["cookie"] = cookie
    return app.answer(Request("POST", path, "", hdrs, body))


def header(response: Response, name: str) -> list[str]:
    return [v for k, v in response.headers if k.lower() == name.lower()]


def text(response: Response) -> str:
    return response.body.decode()


def sign_in(app: Router) -> tuple[str, str]:
    """(the session's Cookie header, the page's CSRF token)."""
    form = get(app, "/login")
    nonce_cookie = header(form, "Set-Cookie")[0].split(";")[0]
    nonce = re.search(r'name="nonce" value="([^"]+)"', text(form))
    assert nonce is not None
    answer = post(app, "/login", {"nonce": nonce[1], "token": TOKEN}, cookie=nonce_cookie)
    assert answer.status == 303
    cookie = next(c for c in header(answer, "Set-Cookie") if c.startswith(auth.SESSION_COOKIE))
    session = cookie.split(";")[0]
    page = text(get(app, "/workspaces/shop", cookie=session))
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    return session, csrf[1]


def test_front_page_lists_each_workspace_with_its_last_run_and_a_link(settings: Settings) -> None:
    ws = FakeWorkspace(settings)
    other = FakeWorkspace(make_settings(settings.state.path.parent / "b"), name="other")
    app = Console(lambda: [ws, other], Gate(None)).mount(Router())
    page = get(app, "/")
    assert page.status == 200 and page.content_type.startswith("text/html")
    html = text(page)
    assert 'href="/workspaces/shop"' in html and 'href="/workspaces/other"' in html
    row = html.split('data-workspace="shop"')[1].split("</tr>")[0]
    # the last run (run 4): created 3, updated 6, unchanged 100, rejected 3, failed 0
    cells = re.findall(r'<td class="n (\w+)">([\d,]+)</td>', row)
    assert cells[:5] == [
        ("created", "3"),
        ("updated", "6"),
        ("unchanged", "100"),
        ("rejected", "3"),
        ("failed", "0"),
    ]
    assert app_mod.when(1795744800) in row  # next run, 2026-11-27T02:00:00Z in local time
    assert '<td class="n pending">2</td>' in row  # the keys waiting in memory
    assert "0 writes in the last minute, of 60 allowed (0 %)" in row
    assert "last run: 9 writes in 4.5 s" in row and "/min)" not in row, "no pace of 4.5 s"
    assert "no run yet" in html.split('data-workspace="other"')[1]


def spend_writes(settings: Settings, n: int) -> None:
    """``n`` writes charged to the workspace's budget ledger, as a run's client charges them."""
    import functools

    from skuferry.config.keys import fingerprint
    from skuferry.remote.budget import Budget
    from skuferry.state.budgetbook import BudgetBook
    from skuferry.state.schema import open_state

    book = BudgetBook(functools.partial(open_state, settings.state.path))
    keys = [fingerprint(k) for k in settings.api_keys]
    with Budget.from_settings(settings.budget, book, keys=keys) as budget:
        for _ in range(n):
            budget.acquire("write")


def test_budget_is_the_limiter_s_window_against_the_cap_not_a_short_run_s_pace(
    settings: Settings,
) -> None:
    """Issue 40 item 1: a run of 9 writes in 4.5 s is not "120/min of 60/min (200 %)"."""
    o = views.overview(FakeWorkspace(settings))
    assert (o.budget.used, o.budget.allowance) == (0, 60)
    assert o.budget.run_per_minute is None, "4.5 s is no span for a per-minute pace"
    spend_writes(settings, 1)
    o = views.overview(FakeWorkspace(settings))
    assert o.budget.now_words == "1 write in the last minute, of 60 allowed (2 %)"
    spend_writes(settings, 29)
    o = views.overview(FakeWorkspace(settings))
    assert (o.budget.used, o.budget.percent) == (30, 50)
    assert o.budget.run_words == "last run: 9 writes in 4.5 s"
    long_run = views.Budget("window", 60.0, run_writes=90, run_duration_s=180.0)
    assert long_run.run_words == "last run: 90 writes (30/min)"
    assert o.last_good is not None and o.last_good.id == 4
    bucket = make_settings(settings.state.path.parent, budget={"limiter": "bucket"})
    spend_writes(bucket, 10)
    words = views.overview(FakeWorkspace(bucket)).budget.now_words
    assert (
        words.startswith("10 writes spent of a 59-write bucket") and "refilled at 60/min" in words
    )


def test_a_run_in_flight_reads_running_since_and_the_page_reloads_itself(
    settings: Settings,
) -> None:
    """Issue 40 items 2 and 4: no "running (exit None)"; a meta refresh, no script."""
    app = app_of(FakeWorkspace(settings), token=None)
    html = text(get(app, "/workspaces/shop"))
    assert '<meta http-equiv="refresh"' not in html, "no run in flight: the page stays still"
    assert "Rendered at " in html
    front = text(get(app, "/"))
    assert f'<meta http-equiv="refresh" content="{app_mod.REFRESH_INDEX_S}">' in front
    mirror = Mirror(settings.state.path)
    try:
        mirror.start_run()
    finally:
        mirror.close()
    html = text(get(app, "/workspaces/shop"))
    last = html.split('id="last-run">')[1].split("</dd>")[0]
    assert "running</span> since " in last and "exit None" not in html
    assert f'<meta http-equiv="refresh" content="{app_mod.REFRESH_RUNNING_S}">' in html
    assert "reloads itself every 10 s" in html
    row = text(get(app, "/")).split('data-workspace="shop"')[1].split("</tr>")[0]
    assert "running</span> since " in row and "exit None" not in row


def test_the_oldest_change_says_none_or_what_it_is(settings: Settings, tmp_path: Path) -> None:
    """Issue 40 item 3: "never" was "none"; a file newer than the last read is said so."""
    from skuferry.sync.read import incremental

    app = app_of(FakeWorkspace(settings), token=None)
    cell = text(get(app, "/workspaces/shop")).split('id="oldest-change">')[1].split("</td>")[0]
    assert cell == "none"
    mirror = Mirror(settings.state.path)
    try:
        mirror.set_meta(incremental.UNSYNCED_SINCE, "1000")
    finally:
        mirror.close()
    cell = text(get(app, "/workspaces/shop")).split('id="oldest-change">')[1].split("</td>")[0]
    assert "ago" in cell and "writes are not all on the CMS yet" in cell


def test_every_page_sends_the_csp_and_no_script(settings: Settings) -> None:
    app = app_of(FakeWorkspace(settings))
    for path in ("/", "/workspaces/shop", "/login", "/console.css", "/workspaces/nope"):
        answer = get(app, path)
        csp = header(answer, "Content-Security-Policy")
        assert csp, path
        for part in (
            "default-src 'none'",
            "style-src 'self'",
            "img-src 'self' data:",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ):
            assert part in csp[0], (path, part)
        assert header(answer, "X-Content-Type-Options") == ["nosniff"]
        assert "<script" not in text(answer) and " style=" not in text(answer)


def test_read_only_without_a_token_no_action_and_posts_refused(settings: Settings) -> None:
    ws = FakeWorkspace(settings)
    app = app_of(ws, token=None)
    html = text(get(app, "/workspaces/shop"))
    assert "SKU-00001" in html
    assert '<form method="post"' not in html and "Send again" not in html
    assert get(app, "/login").status == 404
    assert post(app, "/workspaces/shop/retry", {"key": "SKU-00001"}).status == 403
    assert post(app, "/workspaces/shop/run", {}).status == 403
    assert post(app, "/login", {"token": ""}).status == 403
    assert (ws.runs, ws.retried) == (0, [])


def test_sign_in_sets_a_strict_http_only_cookie_and_shows_the_actions(settings: Settings) -> None:
    ws = FakeWorkspace(settings)
    app = app_of(ws)
    assert "Send again" not in text(get(app, "/workspaces/shop")), "not signed in: no action"
    form = get(app, "/login")
    nonce_cookie = header(form, "Set-Cookie")[0]
    assert "HttpOnly" in nonce_cookie and "SameSite=Strict" in nonce_cookie
    nonce = re.search(r'name="nonce" value="([^"]+)"', text(form))
    assert nonce is not None
    with capture_logs() as logged:
        answer = post(
            app, "/login", {"nonce": nonce[1], "token": TOKEN}, cookie=nonce_cookie.split(";")[0]
        )
    assert answer.status == 303 and header(answer, "Location") == ["/"]
    session = next(c for c in header(answer, "Set-Cookie") if c.startswith("skuferry_session="))
    for part in ("HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"):
        assert part in session
    assert TOKEN not in session and TOKEN not in repr(logged)
    value = session.split(";")[0].split("=", 1)[1]
    assert len(value) >= 40, "a random id of 256 bits"
    html = text(get(app, "/workspaces/shop", cookie=session.split(";")[0]))
    assert "Send again" in html and "Run now" in html and TOKEN not in html


def test_a_wrong_token_or_a_stale_form_is_refused(settings: Settings) -> None:
    app = app_of(FakeWorkspace(settings))
    form = get(app, "/login")
    cookie = header(form, "Set-Cookie")[0].split(";")[0]
    nonce = re.search(r'name="nonce" value="([^"]+)"', text(form))
    assert nonce is not None
    wrong = post(app, "/login", {"nonce": nonce[1], "token": TOKEN + "x"}, cookie=cookie)
    assert wrong.status == 401 and not any(
        c.startswith("skuferry_session") for c in header(wrong, "Set-Cookie")
    )
    assert TOKEN not in text(wrong)
    stale = post(app, "/login", {"nonce": "forged", "token": TOKEN}, cookie=cookie)
    assert stale.status == 403, "the form's nonce must match its cookie"
    no_cookie = post(app, "/login", {"nonce": nonce[1], "token": TOKEN})
    assert no_cookie.status == 403


def test_actions_need_a_session_and_its_csrf_token(settings: Settings) -> None:
    ws = FakeWorkspace(settings)
    app = app_of(ws)
    session, csrf = sign_in(app)
    assert post(app, "/workspaces/shop/retry", {"key": "SKU-00001", "csrf": csrf}).status == 401
    forged = "skuferry_session=" + "A" * 43
    assert (
        post(
            app, "/workspaces/shop/retry", {"key": "SKU-00001", "csrf": csrf}, cookie=forged
        ).status
        == 401
    )
    no_csrf = post(app, "/workspaces/shop/retry", {"key": "SKU-00001"}, cookie=session)
    assert no_csrf.status == 403
    bad_csrf = post(app, "/workspaces/shop/run", {"csrf": csrf[:-1] + "x"}, cookie=session)
    assert bad_csrf.status == 403
    assert (ws.runs, ws.retried) == (0, []), "a refused POST changes nothing"

    sent = post(app, "/workspaces/shop/retry", {"key": "SKU-00001", "csrf": csrf}, cookie=session)
    assert sent.status == 303 and header(sent, "Location")[0].startswith("/workspaces/shop?sent=")
    assert ws.retried == [["SKU-00001"]]
    ran = post(app, "/workspaces/shop/run", {"csrf": csrf}, cookie=session)
    assert ran.status == 303 and ws.runs == 1
    assert "handed to the daemon" in text(get(app, header(sent, "Location")[0], cookie=session))

    out = post(app, "/logout", {"csrf": csrf}, cookie=session)
    assert out.status == 303
    assert post(app, "/workspaces/shop/run", {"csrf": csrf}, cookie=session).status == 401
    assert ws.runs == 1


def test_a_session_expires(settings: Settings) -> None:
    now = [1000.0]
    gate = Gate(TOKEN.encode(), ttl_s=60, clock=lambda: now[0])
    session_id, _ = gate.open()
    assert gate.session(session_id) is not None
    now[0] += 61
    assert gate.session(session_id) is None


def test_a_script_acts_with_the_bearer_token_and_gets_json(settings: Settings) -> None:
    ws = FakeWorkspace(settings)
    app = app_of(ws)
    ok = post(
        app,
        "/workspaces/shop/retry",
        {"key": ["SKU-00001", "SKU-00002"]},
        authorization=f"Bearer {TOKEN}",
    )
    assert ok.status == 202 and ok.content_type == "application/json"
    assert ws.retried == [["SKU-00001", "SKU-00002"]]
    bad = post(app, "/workspaces/shop/run", {}, authorization="Bearer not-the-token")
    assert bad.status == 401 and TOKEN not in text(bad) and ws.runs == 0
    assert post(app, "/workspaces/nope/run", {}, authorization=f"Bearer {TOKEN}").status == 404


def test_the_filter_narrows_the_refused_products(settings: Settings) -> None:
    app = app_of(FakeWorkspace(settings), token=None)

    def keys(query: str) -> list[str]:
        return re.findall(r'<tr data-key="([^"]*)">', text(get(app, f"/workspaces/shop?{query}")))

    assert keys("") == ["SKU-00001", "SKU-00000", "SKU-00002"]  # by stage (map before check)
    assert keys("q=price+1+is") == ["SKU-00001"]
    assert keys("stage=check") == ["SKU-00000", "SKU-00002"]
    assert keys("q=catalog.csv&stage=map") == ["SKU-00001"]
    assert keys("q=%25") == [], "LIKE's wildcards are searched for as text"
    assert keys("stage=bogus") == keys(""), "an unknown stage is no filter"
    html = text(get(app, "/workspaces/shop?q=%3Cscript%3E"))
    assert "<script>" not in html and "&lt;script&gt;" in html, "the filter is escaped"
    row = text(get(app, "/workspaces/shop?q=SKU-00001")).split('data-key="SKU-00001">')[1]
    assert "catalog.csv:2" in row and "map" in row and "price 1 is not a decimal" in row


def test_refused_products_are_paged(tmp_path: Path) -> None:
    s = make_settings(tmp_path)
    seed_state(s.state.path, letters=450)
    page = views.refused(FakeWorkspace(s), offset=400)
    assert page.total == 450 and len(page.letters) == 50 and page.shown_to == 450
    html = text(get(app_of(FakeWorkspace(s), None), "/workspaces/shop"))
    assert html.count("<tr data-key=") == views.PAGE_SIZE and "offset=200" in html


def test_the_chart_is_svg_with_one_bar_per_count_and_a_duration_line(settings: Settings) -> None:
    runs = views.recent_runs(FakeWorkspace(settings))
    svg = ET.fromstring(chart.runs_svg(runs))  # noqa: S314 - our own output
    ns = "{http://www.w3.org/2000/svg}"
    assert svg.tag == f"{ns}svg"
    bars = svg.findall(f"{ns}rect")
    # 4 runs: created 0..3, updated 0..6 (zero bars are left out), rejected 3 each
    assert len(bars) == 3 + 3 + 4
    heights = {b.findtext(f"{ns}title"): float(b.get("height", "0")) for b in bars}
    assert heights["run 4: 3 rejected, 4.5 s"] == pytest.approx(heights["run 1: 3 rejected, 1.5 s"])
    assert heights["run 4: 6 updated, 4.5 s"] == pytest.approx(
        2 * heights["run 4: 3 created, 4.5 s"]
    )
    line = svg.find(f"{ns}polyline")
    assert line is not None and len(line.get("points", "").split()) == 4
    assert "style" not in chart.runs_svg(runs)
    empty = ET.fromstring(chart.runs_svg([]))  # noqa: S314 - our own output
    assert "no runs yet" in "".join(empty.itertext())
    assert chart.runs_svg(runs) in text(
        get(app_of(FakeWorkspace(settings), None), "/workspaces/shop")
    )


def test_one_product_s_planned_change_is_computed_on_request(tmp_path: Path) -> None:
    (tmp_path / "products.csv").write_text("sku,name,price\nA-1,Alpha,1.50\nB-2,Beta,x\n")
    s = make_settings(
        tmp_path,
        mapping={
            "key": "sku",
            "fields": {
                "sku": "sku",
                "name": "name",
                "price": {"column": "price", "type": "decimal"},
            },
        },
    )
    Mirror(s.state.path).close()
    app = app_of(FakeWorkspace(s), token=None)
    html = text(get(app, "/workspaces/shop?plan=A-1"))
    planned = html.split('id="planned"')[1].split("</div>")[0]
    assert "create it on the CMS" in planned and "<td>price</td>" in planned and "1.50" in planned
    assert "refused" in text(get(app, "/workspaces/shop?plan=B-2")).split('id="planned"')[1]
    missing = text(get(app, "/workspaces/shop?plan=NOPE")).split('id="planned"')[1]
    assert "neither the source nor the state knows this key" in missing
    before = s.state.path.stat().st_mtime_ns
    assert s.state.path.stat().st_mtime_ns == before


def test_unknown_workspace_and_methods(settings: Settings) -> None:
    app = app_of(FakeWorkspace(settings))
    assert get(app, "/workspaces/nope").status == 404
    assert app.answer(Request("GET", "/workspaces/shop/run", "", {}, b"")).status == 405
    assert app.answer(Request("POST", "/", "", {}, b"")).status == 405


def test_the_token_comes_from_the_one_resolver_and_names_its_own_key(tmp_path: Path) -> None:
    s = make_settings(tmp_path, daemon={"console_token_env": "CONSOLE_TOKEN"})
    with pytest.raises(ConfigError, match=r"daemon\.console_token_env"):
        auth.load_token(s.daemon, env={})
    with pytest.raises(ConfigError, match="at least 16"):
        auth.load_token(s.daemon, env={"CONSOLE_TOKEN": "short"})
    assert auth.load_token(s.daemon, env={"CONSOLE_TOKEN": TOKEN}) == TOKEN.encode()
    token_file = tmp_path / "console_token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    f = make_settings(tmp_path, daemon={"console_token_file": str(token_file)})
    assert auth.load_token(f.daemon) == TOKEN.encode()
    assert auth.load_token(make_settings(tmp_path).daemon) is None
    with pytest.raises(ValueError, match="one of console_token_file and console_token_env"):
        make_settings(
            tmp_path, daemon={"console_token_file": str(token_file), "console_token_env": "X"}
        )


def test_rendering_leaves_the_state_file_untouched(settings: Settings) -> None:
    app = app_of(FakeWorkspace(settings), None)
    before = settings.state.path.read_bytes()
    for path in ("/", "/workspaces/shop", "/workspaces/shop?q=SKU"):
        assert get(app, path).status == 200
    assert settings.state.path.read_bytes() == before


def test_due_says_when_and_how_far_off() -> None:
    assert app_mod.due("2026-11-27T02:00:00+00:00", 1795744800 - 600) == (
        f"{app_mod.when(1795744800)} (in 10 min)"
    )
    assert app_mod.due("2026-11-27T02:00:00+00:00", 1795744800 + 5).endswith("(due now)")
    assert app_mod.due(None, 0) == "none scheduled"
    assert [app_mod.ago(s) for s in (None, 42, 300, 3 * 3600 + 600, 2 * 86400 + 4 * 3600)] == [
        "never",
        "42 s",
        "5 min",
        "3 h 10 min",
        "2 d 4 h",
    ]


def test_a_console_token_file_every_user_may_read_is_refused(tmp_path: Path) -> None:
    from skuferry.config import security

    token_file = tmp_path / "console_token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o644)
    s = make_settings(tmp_path, daemon={"console_token_file": str(token_file)})
    found = security.problems(s)
    assert any("at 'daemon.console_token_file'" in p and "chmod 600" in p for p in found)
    token_file.chmod(0o600)
    assert not any("console_token" in p for p in security.problems(s))


def test_the_chart_labels_its_runs_as_the_table_numbers_them(settings: Settings) -> None:
    """Issue 40 item 5: a bar is matched to a row by its run id under it."""
    ns = "{http://www.w3.org/2000/svg}"
    runs = views.recent_runs(FakeWorkspace(settings))
    svg = ET.fromstring(chart.runs_svg(runs))  # noqa: S314 - our own output
    labels = [t.text for t in svg.iter(f"{ns}text") if t.get("class") == "run-id"]
    assert labels == ["1", "2", "3", "4"], "oldest on the left, as the bars"
    bars = {b.findtext(f"{ns}title"): b for b in svg.iter(f"{ns}rect")}
    label_x = {t.text: float(t.get("x", "0")) for t in svg.iter(f"{ns}text") if t.text in labels}
    bar = bars["run 3: 3 rejected, 3.5 s"]
    assert (
        float(bar.get("x", "0"))
        < label_x["3"]
        < float(bar.get("x", "0")) + float(bar.get("width", "0"))
    ), "the label stands under its own bar"
    many = [
        views.Run(
            1000 + i,
            1.0e9 + i,
            1.0e9 + i + 1,
            "ok",
            0,
            dict.fromkeys(views.COUNTS, 1),
            1.0,
            1,
            None,
        )
        for i in range(views.RECENT_RUNS)
    ]
    crowded = ET.fromstring(chart.runs_svg(list(reversed(many))))  # noqa: S314 - our own output
    xs = [float(t.get("x", "0")) for t in crowded.iter(f"{ns}text") if t.get("class") == "run-id"]
    assert (
        1 < len(xs) < views.RECENT_RUNS and min(b - a for a, b in itertools.pairwise(xs)) > 4 * 6.5
    )
    newest = [t.text for t in crowded.iter(f"{ns}text") if t.get("class") == "run-id"][-1]
    assert newest == str(1000 + views.RECENT_RUNS - 1), "the newest run always has its label"


def test_a_key_the_source_no_longer_holds_is_planned_as_the_gone_policy_says(
    tmp_path: Path,
) -> None:
    """Issue 40 item 7: not "nothing", but what [gone] will do with it."""
    from skuferry import canonical
    from skuferry.models import Product

    (tmp_path / "products.csv").write_text("sku,name,stock\nA-1,Alpha,5\n")
    mapping = {"key": "sku", "fields": {"sku": "sku", "name": "name", "stock": "stock"}}
    payload = {"sku": "OLD-1", "name": "Old", "stock": "7"}
    mirror = Mirror(tmp_path / "state.db")
    try:
        mirror.record_created(Product("OLD-1", payload, canonical.digest(payload), 2), "p_1")
    finally:
        mirror.close()

    def planned(**extra: Any) -> str:
        s = make_settings(tmp_path, mapping=mapping, **extra)
        html = text(get(app_of(FakeWorkspace(s), token=None), "/workspaces/shop?plan=OLD-1"))
        return html.split('id="planned"')[1].split("</div>")[0]

    leave = planned()
    assert "action = &#34;leave&#34;" in leave and "marks it gone here" in leave
    archive = planned(gone={"action": "patch", "patch": {"status": "archived", "stock": 0}})
    assert "archive it" in archive and "sends it the patch once" in archive
    assert "<td>stock</td><td><code>&#34;7&#34;</code></td><td><code>0</code></td>" in archive
    assert "<td>status</td><td><code>—</code></td>" in archive
    nobody = text(
        get(
            app_of(FakeWorkspace(make_settings(tmp_path, mapping=mapping)), None),
            "/workspaces/shop?plan=NOPE",
        )
    )
    assert "neither the source nor the state knows this key" in nobody


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("offset=99999999999999999999", "offset must be a whole number"),  # >= 2**63
        ("offset=%C2%B2", "offset must be a whole number"),  # "²": isdigit() yet not int()
        ("&".join(f"f{i}=1" for i in range(21)), "too many query fields (at most 20)"),
    ],
)
def test_a_query_the_page_cannot_answer_is_a_400_with_one_event(
    settings: Settings, query: str, words: str
) -> None:
    """Issue 40 item 8: these were 500s with a traceback in the log."""
    app = app_of(FakeWorkspace(settings), token=None)
    paths = ["/workspaces/shop"] + (["/"] if "offset" not in query else [])
    for path in paths:
        with capture_logs() as logged:
            answer = get(app, f"{path}?{query}")
        assert answer.status == 400, path
        assert words in text(answer) and "Traceback" not in text(answer)
        assert [e["event"] for e in logged if e["log_level"] in ("warning", "error")] == [
            "console.query.refused"
        ]
        script = get(app, f"{path}?{query}", accept="application/json")
        assert script.status == 400 and words in script.body.decode()
    assert get(app, "/workspaces/shop?offset=1000000000").status == 200, "the largest is fine"


def test_wrong_tokens_from_one_address_are_braked_without_locking_out_others() -> None:
    """Issue 40 item 9: ten wrong tokens a minute from one address, then 429 + Retry-After."""
    now = [1000.0]
    brake = auth.Brake(clock=lambda: now[0])
    for i in range(auth.BRAKE_FAILURES):
        assert brake.wait_s("10.0.0.9") == 0
        assert brake.failed("10.0.0.9") is (i == auth.BRAKE_FAILURES - 1)
        now[0] += 1
    assert brake.wait_s("10.0.0.9") == 50, "until the first failure is a minute old"
    assert brake.wait_s("127.0.0.1") == 0, "another address is not slowed"
    now[0] += 50
    assert brake.wait_s("10.0.0.9") == 0, "a minute at the worst"
    brake.failed("10.0.0.9")
    assert brake.wait_s("10.0.0.9") > 0, "one more failure within the minute: waits again"
    brake.passed("10.0.0.9")
    assert brake.wait_s("10.0.0.9") == 0
    small = auth.Brake(peers=3, clock=lambda: now[0])
    for peer in ("a", "b", "c", "d"):
        small.failed(peer)
    assert len(small._seen) == 3, "the table of addresses is bounded"


def test_sign_in_answers_429_after_ten_wrong_tokens_and_health_is_untouched(
    settings: Settings,
) -> None:
    from skuferry.service.http_endpoint import routes

    ws = FakeWorkspace(settings)
    console = Console(lambda: [ws], Gate(TOKEN.encode()))

    class Board:
        def health(self) -> tuple[int, dict[str, Any]]:
            return 200, {"status": "ok", "problems": []}

        def liveness(self) -> tuple[int, dict[str, Any]]:
            return 200, {"status": "alive", "problems": []}

        def metrics_text(self) -> str:
            return ""

    app = routes(Board(), None, console.mount)

    def attempt(token: str, peer: str = "192.0.2.7") -> Response:
        form = app.answer(Request("GET", "/login", "", {}, b"", peer=peer))
        nonce = re.search(r'name="nonce" value="([^"]+)"', text(form))
        assert nonce is not None
        cookie = header(form, "Set-Cookie")[0].split(";")[0]
        body = urlencode({"nonce": nonce[1], "token": token}).encode()
        hdrs = {"cookie": cookie, "content-type": "application/x-www-form-urlencoded"}
        return app.answer(Request("POST", "/login", "", hdrs, body, peer=peer))

    with capture_logs() as logged:
        codes = [attempt("wrong-token-123456").status for _ in range(12)]
    assert codes == [401] * 10 + [429] * 2
    braked = attempt(TOKEN)
    assert braked.status == 429, "not even the right token is tried while braked"
    assert 0 < int(header(braked, "Retry-After")[0]) <= 60
    assert [e["event"] for e in logged].count("console.login.braked") == 1
    assert attempt(TOKEN, peer="198.51.100.1").status == 303, "the operator elsewhere signs in"
    health = app.answer(Request("GET", "/healthz", "", {}, b"", peer="192.0.2.7"))
    assert health.status == 200, "/healthz is never braked"


def test_a_fleet_s_front_page_puts_failing_and_stale_first_with_totals_and_a_filter(
    tmp_path: Path,
) -> None:
    """Issue 40 item 6 (``python -m bench --only consolefleet`` times it for 100)."""
    from bench.console import FLEET_STATES, fleet

    shops = fleet(tmp_path, 20)
    app = Console(lambda: list(reversed(shops)), Gate(None)).mount(Router())

    def rows(query: str = "") -> list[tuple[str, str]]:
        html = text(get(app, f"/?{query}"))
        return re.findall(r'<tr data-workspace="([^"]+)" data-state="(\w+)">', html)

    listed = rows()
    assert len(listed) == 20
    order = [state for _name, state in listed]
    assert order == sorted(order, key=views.STATES.index), "the worst first"
    assert order[:4] == ["failing", "failing", "stale", "stale"]
    assert [n for n, s in listed if s == "ok"] == sorted(n for n, s in listed if s == "ok")
    want = {s: FLEET_STATES[:10].count(s) * 2 for s in views.STATES}
    totals = text(get(app, "/")).split('id="totals"')[1].split("</section>")[0]
    assert "<strong>20 workspaces:</strong>" in totals
    for state, n in want.items():
        assert f">{n} {state}</a>" in totals
    assert "900 refused products waiting" in totals  # 18 with a state file, 50 each
    assert rows("state=failing") == [("shop-000", "failing"), ("shop-010", "failing")]
    assert rows("q=SHOP-01") == sorted(
        [(n, s) for n, s in listed if n.startswith("shop-01")],
        key=lambda r: (views.STATES.index(r[1]), r[0]),
    ), "by name, any case"
    assert rows("q=shop-01&state=ok") == [
        (n, "ok") for n in ("shop-014", "shop-015", "shop-016", "shop-017", "shop-018", "shop-019")
    ]
    assert "no workspace matches" in text(get(app, "/?q=nope"))
    assert rows("state=bogus") == listed, "an unknown state is no filter"
    single = text(get(app_of(FakeWorkspace(shops[5].settings)), "/"))
    assert 'id="totals"' not in single and 'id="ws-filter"' not in single, (
        "one workspace: a plain list"
    )
