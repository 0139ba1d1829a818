"""The operator's page in a real browser: Debian's headless Chromium driven by Selenium
through ``chromedriver``, against ``skuferry run`` as a real process and the sandbox CMS.

An operator signs in, finds the product the CMS refused, sends it again once the CMS side
is fixed, and sees it on the CMS; a POST whose session is gone is refused and changes
nothing; every page renders with no error in the browser's console (the CSP blocks
nothing the page needs). The page's figures read as an operator expects them (issue 40),
and a fleet's front page of 100 workspaces sorts, adds up and filters. With
``SKUFERRY_CONSOLE_SCREENSHOTS=DIR`` the front page, a workspace's page and the fleet's
front page are saved there as PNGs (docs/images/ is made so).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from skuferry.sandbox import Sandbox
from tests.fakes import log_events as events
from tests.fakes import wait_until
from tests.integration.conftest import catalog_rows, clean_env, closed_port_url, remote_counts

pytestmark = pytest.mark.integration

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.webdriver.common.by import By  # noqa: E402 - after the skip
from selenium.webdriver.support.select import Select  # noqa: E402 - after the skip

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
TOKEN = "console-token-Hq2wE9rT5yU1"
REFUSED = "SKU-00002"

if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
    pytest.skip(
        "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1280,1000",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER, log_output=subprocess.DEVNULL)
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def daemon(
    tmp_path: Path,
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
) -> Iterator[tuple[str, Sandbox, Path]]:
    # the CMS requires a name: SKU-00002, without one, is refused (422) by the first run
    sandbox = sandbox_factory(updates="patch", required_fields=("sku", "name"))
    rows = catalog_rows(5)
    rows[1]["Name"] = ""
    write_catalog(rows)
    token_file = tmp_path / "console_token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    listen = closed_port_url().removeprefix("http://")
    extra = (
        "[schedule]\ninterval_minutes = 600\nrun_at_start = true\n"
        f'[daemon]\nlisten = "{listen}"\nconsole_token_file = "{token_file}"\n'
    )
    config = write_config(sandbox.url, extra=extra, name="shop.toml")
    err = tmp_path / "daemon.log"
    with err.open("wb") as err_f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "skuferry", "--log-format", "json", "run", "-c", str(config)],
            cwd=tmp_path,
            env=clean_env(),
            stderr=err_f,
            stdout=subprocess.DEVNULL,
        )
        try:
            wait_until(
                lambda: any(e.get("event") == "daemon.run.finished" for e in events(err)),
                "the daemon's first run",
            )
            yield f"http://{listen}", sandbox, err
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    assert TOKEN not in err.read_text(), "the token is never logged"


def console_errors(driver: Any) -> list[dict[str, Any]]:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def screenshot(driver: Any, name: str) -> None:
    folder = os.environ.get("SKUFERRY_CONSOLE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        height = driver.execute_script("return document.documentElement.scrollHeight")
        frame = driver.execute_script("return window.outerHeight - window.innerHeight")
        driver.set_window_size(1280, max(600, min(int(height) + int(frame), 2400)))
        driver.save_screenshot(str(Path(folder) / name))
        driver.set_window_size(1280, 1000)


def shown(driver: Any, css: str) -> Any:
    """The element once the page that shows it has loaded (a form's answer comes later)."""
    wait_until(lambda: bool(driver.find_elements(By.CSS_SELECTOR, css)), f"{css} on the page")
    return driver.find_element(By.CSS_SELECTOR, css)


def refused_keys(driver: Any) -> list[str]:
    return [
        row.get_attribute("data-key")
        for row in driver.find_elements(By.CSS_SELECTOR, "#letters tbody tr")
    ]


def test_sign_in_find_a_refused_product_send_it_again_and_see_it_on_the_cms(
    daemon: tuple[str, Sandbox, Path], browser: Any
) -> None:
    url, sandbox, log = daemon
    assert REFUSED not in remote_counts(sandbox), "refused by the first run"

    browser.get(url + "/")
    assert console_errors(browser) == []
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-workspace="shop"]')
    assert row.find_element(By.CSS_SELECTOR, "td.created").text == "4"
    assert row.find_element(By.CSS_SELECTOR, "td.rejected").text == "1"
    screenshot(browser, "console-index.png")
    row.find_element(By.LINK_TEXT, "shop").click()
    assert browser.current_url.endswith("/workspaces/shop")
    assert console_errors(browser) == []
    assert refused_keys(browser) == [REFUSED]
    assert browser.find_elements(By.CSS_SELECTOR, "button.retry") == [], "not signed in"
    assert browser.find_element(By.CSS_SELECTOR, "svg.chart").is_displayed()

    # the filter (a GET form): a key that is not refused shows none
    box = browser.find_element(By.ID, "q")
    box.send_keys("SKU-00004")
    box.submit()
    wait_until(lambda: "q=SKU-00004" in browser.current_url, "the filtered page")
    assert refused_keys(browser) == []
    browser.find_element(By.ID, "q").clear()
    browser.find_element(By.ID, "q").send_keys("00002")
    browser.find_element(By.ID, "q").submit()
    wait_until(lambda: "q=00002" in browser.current_url, "the filtered page")
    assert refused_keys(browser) == [REFUSED]

    browser.get(url + "/login")
    assert console_errors(browser) == []
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "token").submit()
    wait_until(lambda: browser.current_url == url + "/", "the front page after signing in")
    cookies = {c["name"]: c for c in browser.get_cookies()}
    session = cookies["skuferry_session"]
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    assert TOKEN not in browser.page_source

    browser.get(url + "/workspaces/shop")
    shown(browser, "#run-now").click()  # a full run, as POST /hooks/run asks for
    assert "A run was asked for" in shown(browser, ".notice").text

    def runs() -> int:
        return sum(1 for e in events(log) if e.get("event") == "daemon.run.finished")

    wait_until(lambda: runs() == 2, "the run asked for")
    browser.get(url + "/workspaces/shop")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#run-table tbody tr")) == 2
    assert refused_keys(browser) == [REFUSED], "the same data: still refused"
    screenshot(browser, "console-workspace.png")
    sandbox.config.required_fields = ("sku",)  # the CMS side is fixed
    letter = browser.find_element(By.CSS_SELECTOR, f'tr[data-key="{REFUSED}"]')
    letter.find_element(By.CSS_SELECTOR, "button.retry").click()
    assert "handed to the daemon" in shown(browser, ".notice").text
    wait_until(lambda: remote_counts(sandbox)[REFUSED] == 1, f"{REFUSED} on the CMS")

    def gone_from_the_page() -> bool:
        browser.get(url + "/workspaces/shop")
        return refused_keys(browser) == []

    wait_until(gone_from_the_page, "the refused list to empty")
    assert console_errors(browser) == []
    assert remote_counts(sandbox)[REFUSED] == 1, "sent once"


def test_a_post_without_a_session_is_refused_and_changes_nothing(
    daemon: tuple[str, Sandbox, Path], browser: Any
) -> None:
    url, sandbox, log = daemon
    sandbox.config.required_fields = ("sku",)  # a retry would now succeed: none must happen
    browser.get(url + "/login")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "token").submit()
    wait_until(lambda: browser.current_url == url + "/", "signed in")
    browser.get(url + "/workspaces/shop")
    button = browser.find_element(
        By.CSS_SELECTOR, f'tr[data-key="{REFUSED}"] button.retry'
    )  # a form with a valid CSRF token...
    browser.delete_all_cookies()  # ... whose session is gone
    console_errors(browser)  # (drain)
    button.click()
    assert "sign in first" in shown(browser, ".problem").text
    refused = console_errors(browser)
    assert any("401" in e["message"] for e in refused), "the console log is read: a 401 shows"

    # and without a browser: no cookie, a forged one, or a wrong bearer token
    target = f"{url}/workspaces/shop/retry"
    assert httpx.post(target, data={"key": REFUSED}).status_code == 401
    forged = httpx.post(
        target, data={"key": REFUSED, "csrf": "x"}, headers={"Cookie": "skuferry_session=x"}
    )
    assert forged.status_code == 401
    bearer = httpx.post(target, data={"key": REFUSED}, headers={"Authorization": "Bearer nope"})
    assert bearer.status_code == 401
    # each refusal was answered after the page decided: had it queued the key, the
    # daemon's log would already say so
    said = {e.get("event") for e in events(log)}
    assert "console.action.refused" in said
    assert not said & {"console.retry", "daemon.retry.queued", "daemon.targeted.started"}
    assert REFUSED not in remote_counts(sandbox), "nothing was sent"


def test_the_page_s_figures_read_as_an_operator_expects(
    daemon: tuple[str, Sandbox, Path], browser: Any, write_catalog: Callable[..., Path]
) -> None:
    """Issue 40 items 1-5, 7-9 as a person sees them in the browser."""
    url, _sandbox, log = daemon
    browser.get(url + "/")
    assert console_errors(browser) == []
    refresh = browser.find_element(By.CSS_SELECTOR, 'meta[http-equiv="refresh"]')
    assert refresh.get_attribute("content") == "60", "the front page reloads itself (item 4)"
    assert browser.find_element(By.ID, "rendered").text.startswith("Rendered at ")
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-workspace="shop"]')
    short = row.find_element(By.CSS_SELECTOR, ".budget-now").text
    assert re.fullmatch(r"[\d,]+ of [\d,]+ \(\d+ %\)", short), short
    assert "exit None" not in row.text

    browser.get(url + "/workspaces/shop")
    budget = browser.find_element(By.CSS_SELECTOR, "#budget .budget-now").text
    found = re.fullmatch(
        r"(\d+) writes? in the last minute, of ([\d,]+) allowed \((\d+) %\)", budget
    )
    assert found is not None, budget  # item 1: the limiter's window, not a run's pace
    assert 0 < int(found[1]) <= int(found[2].replace(",", "")) and int(found[3]) <= 100
    assert short == f"{found[1]} of {found[2]} ({found[3]} %)", "the front page says the same"
    assert "/min)" not in browser.find_element(By.ID, "budget").text, "a short run: no pace"
    assert not browser.find_elements(By.CSS_SELECTOR, 'meta[http-equiv="refresh"]'), "no run"
    assert browser.find_element(By.ID, "oldest-change").text == "none"  # item 3
    rows = [
        r.find_element(By.CSS_SELECTOR, "td").text
        for r in browser.find_elements(By.CSS_SELECTOR, "#run-table tbody tr")
    ]
    labels = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "svg.chart text.run-id")]
    assert labels == list(reversed(rows)) == ["1"], "a bar is matched to its row (item 5)"

    # item 7: a key the source no longer holds, planned as [gone] (action "leave") says
    write_catalog(catalog_rows(4))
    box = browser.find_element(By.ID, "plan")
    box.send_keys("SKU-00005")
    box.submit()
    planned = shown(browser, "#planned").text
    assert "the source no longer holds it" in planned and "marks it gone here" in planned

    # item 8: each of these was a 500 with a traceback in the log
    for query in (
        "offset=99999999999999999999",
        "offset=%C2%B2",
        "&".join(f"f{i}=1" for i in range(21)),
    ):
        answer = httpx.get(f"{url}/workspaces/shop?{query}")
        assert answer.status_code == 400, query
    browser.get(url + "/workspaces/shop?offset=%C2%B2")
    assert "offset must be a whole number" in shown(browser, ".problem").text
    said = [e.get("event") for e in events(log)]
    assert said.count("console.query.refused") == 4 and "daemon.http.failed" not in said

    # item 9: ten wrong tokens a minute from one address, then 429 with Retry-After
    with httpx.Client(base_url=url) as client:
        codes = []
        for _ in range(11):
            form = client.get("/login").text
            nonce = re.search(r'name="nonce" value="([^"]+)"', form)
            assert nonce is not None
            answer = client.post("/login", data={"nonce": nonce[1], "token": "wrong-guess-0000"})
            codes.append(answer.status_code)
            assert client.get("/healthz").status_code == 200, "health is never braked"
        assert codes == [401] * 10 + [429]
        assert 0 < int(answer.headers["Retry-After"]) <= 60
    browser.get(url + "/login")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "token").submit()
    assert "too many wrong tokens from this address" in shown(browser, ".problem").text
    assert [e.get("event") for e in events(log)].count("console.login.braked") == 1


class _Board:
    def health(self) -> tuple[int, dict[str, Any]]:
        return 200, {"status": "ok", "problems": []}

    def liveness(self) -> tuple[int, dict[str, Any]]:
        return 200, {"status": "alive", "problems": []}

    def metrics_text(self) -> str:
        return ""


@pytest.fixture
def fleet_page(tmp_path: Path) -> Iterator[str]:
    """The page over 100 workspaces in every state (``bench.console.fleet``), served as the
    daemon serves it."""
    from bench.console import fleet

    from skuferry.service.console.app import Console
    from skuferry.service.console.auth import Gate
    from skuferry.service.http_endpoint import routes
    from skuferry.service.http_server import HttpServer

    shops = fleet(tmp_path / "fleet", 100)
    app = routes(_Board(), None, Console(lambda: shops, Gate(None)).mount)
    server = HttpServer("127.0.0.1:0", app).start()
    try:
        yield server.url
    finally:
        server.stop()


def test_a_fleet_s_front_page_in_the_browser(fleet_page: str, browser: Any) -> None:
    """Issue 40 item 6: failing and stale first, totals, a filter by name and state."""
    browser.get(fleet_page + "/")
    assert console_errors(browser) == []
    assert browser.find_element(By.ID, "totals").text.startswith("100 workspaces:")
    states = [
        r.get_attribute("data-state")
        for r in browser.find_elements(By.CSS_SELECTOR, "#workspaces tbody tr")
    ]
    assert len(states) == 100 and states[:20] == ["failing"] * 10 + ["stale"] * 10
    running = browser.find_element(By.CSS_SELECTOR, 'tr[data-state="running"] td.last').text
    assert running.startswith("running since ") and "exit" not in running  # item 2
    screenshot(browser, "console-fleet.png")

    Select(browser.find_element(By.ID, "state")).select_by_value("failing")
    browser.find_element(By.ID, "q").send_keys("shop-0")
    browser.find_element(By.ID, "q").submit()
    wait_until(lambda: "state=failing" in browser.current_url, "the filtered front page")
    names = [
        r.get_attribute("data-workspace")
        for r in browser.find_elements(By.CSS_SELECTOR, "#workspaces tbody tr")
    ]
    assert names == [f"shop-0{i}0" for i in range(10)]
    assert browser.find_element(By.ID, "ws-count").text.startswith("10 of 100 shown")


def test_a_fleet_s_page_shows_a_broken_reload_and_a_late_run(
    tmp_path: Path, sandbox_factory: Callable[..., Sandbox], browser: Any
) -> None:
    """Issue 40 item 10, issue 41 item 4: a workspace whose reload failed keeps running on
    its old config and the page says where the file is broken; with one run slot, a run
    asked for while another holds it is late, and the page says so."""
    from tests.integration.test_fleet import DAEMON, SHOPS, free_listen, workspace_config

    sandbox = sandbox_factory(updates="patch", keys={key: name for name, key in SHOPS.items()})
    folder = tmp_path / "workspaces"
    for name in ("acme", "bolt"):
        workspace_config(folder, name, sandbox.url, SHOPS[name], 40, extra=DAEMON)
    token_file = tmp_path / "console_token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    listen = free_listen()
    url = f"http://{listen}"
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    err = tmp_path / "fleet.log"
    args = ["run", "--workspaces", str(folder), "--listen", listen, "--max-runs", "1"]
    args += ["--console-token-file", str(token_file)]
    with err.open("wb") as err_f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "skuferry", "--log-format", "json", *args],
            cwd=tmp_path,
            env=clean_env(),
            stderr=err_f,
            stdout=subprocess.DEVNULL,
        )
        try:

            def health() -> dict[str, Any]:
                try:
                    body: dict[str, Any] = httpx.get(f"{url}/healthz", timeout=10).json()
                except httpx.HTTPError:
                    return {}
                return body

            def ran(name: str, runs: int) -> bool:
                return (
                    sum(
                        1
                        for e in events(err)
                        if e.get("event") == "daemon.run.finished" and e.get("workspace") == name
                    )
                    >= runs
                )

            wait_until(lambda: ran("acme", 1) and ran("bolt", 1), "both first runs")

            # bolt's file breaks (an unterminated string on line 2); SIGHUP keeps its old one
            (folder / "bolt.toml").write_text('[api]\nbase_url = "http://127.0.0.1:9\n')
            proc.send_signal(signal.SIGHUP)
            wait_until(lambda: health().get("degraded") == ["bolt"], "bolt degraded")
            body = health()
            assert body["status"] == "degraded" and body["failing"] == []
            (entry,) = body["workspaces"]["bolt"]["degraded"]
            assert (entry["file"], entry["line"]) == (str(folder / "bolt.toml"), 2)
            assert httpx.get(f"{url}/livez", timeout=10).status_code == 200
            assert (
                'skuferry_config_reload_failed{workspace="bolt"} 1.0'
                in httpx.get(f"{url}/metrics", timeout=10).text
            )

            # acme's run holds the one slot (18 prices changed, a slow CMS); bolt's waits
            changed = catalog_rows(18, version=1) + catalog_rows(40)[18:]
            lines = ["SKU,Name,Price,Stock"] + [
                f"{r['SKU']},{r['Name']},{r['Price']},{r['Stock']}" for r in changed
            ]
            (tmp_path / "acme.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
            sandbox.config.latency_s = 4.0  # 18 updates, 4 at once: 20 s, until set back
            assert httpx.post(f"{url}/workspaces/acme/run", headers=bearer).status_code == 202
            wait_until(lambda: health().get("runs", {}).get("running") == 1, "acme's run")
            assert httpx.post(f"{url}/workspaces/bolt/run", headers=bearer).status_code == 202
            wait_until(lambda: health().get("late") == ["bolt"], "bolt's run late")

            browser.get(url + "/")
            assert console_errors(browser) == []
            assert "1 run waiting for a slot" in shown(browser, "#runs").text
            assert "bolt" in shown(browser, "#degraded").text
            assert "line 2" in shown(browser, "#degraded").text
            bolt = browser.find_element(By.CSS_SELECTOR, 'tr[data-workspace="bolt"]')
            assert "late: waiting" in bolt.find_element(By.CSS_SELECTOR, ".late").text
            assert "reload failed" in bolt.text
            screenshot(browser, "console-fleet-late.png")
            browser.get(url + "/workspaces/bolt")
            assert console_errors(browser) == []
            said = shown(browser, "#degraded").text
            assert f"{folder / 'bolt.toml'} line 2" in said
            assert "runs on the config it had" in said
            assert "waited" in shown(browser, "#late").text

            sandbox.config.latency_s = 0.0
            wait_until(lambda: ran("bolt", 2), "bolt's run, late but not skipped")
            assert health().get("late") == []
            browser.get(url + "/workspaces/bolt")
            assert browser.find_elements(By.CSS_SELECTOR, "#late") == []
        finally:
            sandbox.config.latency_s = 0.0
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert TOKEN not in err.read_text(), "the token is never logged"
