"""The operator's page as a WSGI application: routes, sign-in, CSRF, CSP, read-only mode,
the refused products' filter, the runs' chart, one product's planned change."""

from __future__ import annotations

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

    def next_run(self) -> str | None:
        return "2026-11-27T02:00:00+00:00"

    def waiting(self) -> int:
        return 2

    def run_now(self) -> None:
        self.runs += 1

    def retry(self, keys: Sequence[str]) -> None:
        self.retried.append(list(keys))


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
    assert "9 writes at 120/min of " in row
    assert "no run yet" in html.split('data-workspace="other"')[1]


def test_budget_is_the_last_run_s_pace_against_the_cap(settings: Settings) -> None:
    o = views.overview(FakeWorkspace(settings), wall_clock=0)
    assert o.budget.writes == 9 and o.budget.per_minute == pytest.approx(9 * 60 / 4.5)
    assert o.budget.cap_per_minute == settings.budget.write_per_minute
    assert o.budget.percent == round(100 * 120 / settings.budget.write_per_minute)
    assert o.last_good is not None and o.last_good.id == 4


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
    assert "does not hold this key" in missing
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
