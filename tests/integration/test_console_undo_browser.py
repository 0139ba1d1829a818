"""Undo a run from the operator's page, in a real browser (headless Chromium through
Selenium) against ``skuferry run`` and the sandbox: a bad feed was forced through; the
signed-in operator opens the run's page, sees the dry run's preview, confirms, and the CMS
is back as it was (but the product edited there since). An anonymous POST and one with a
wrong CSRF token change nothing. The product page tells a product's story, reached from
the run's page and from the search box.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from skuferry.sandbox import Sandbox
from skuferry.sources.change_token import RACY_S
from tests.fakes import log_events as events
from tests.fakes import wait_until
from tests.integration.conftest import WORKSPACE, catalog_rows, clean_env, closed_port_url
from tests.integration.test_console_browser import (  # the browser and its helpers
    TOKEN,
    browser,
    console_errors,
    screenshot,
    shown,
)

pytestmark = pytest.mark.integration

from selenium.webdriver.common.by import By  # noqa: E402 - after test_console_browser's skip

__all__ = ["browser"]  # a fixture, imported for this module's tests
EDITED = "SKU-00004"


def _aged(path: Path) -> None:
    newest = max(path.stat().st_mtime, path.stat().st_ctime)
    if (age := time.time() - newest) < RACY_S:
        time.sleep(RACY_S - age + 0.1)


def _prices(sandbox: Sandbox) -> dict[str, Decimal]:
    return {str(p["sku"]): Decimal(str(p["price"])) for p in sandbox.products(WORKSPACE)}


@pytest.fixture
def shop(
    tmp_path: Path,
    sandbox_factory: Callable[..., Sandbox],
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> Iterator[tuple[str, Sandbox, Path, dict[str, Decimal]]]:
    """20 products synced, then every price times 100 forced through (run 2), one product
    mended by hand on the CMS since; then the daemon serves the page (no run of its own)."""
    sandbox = sandbox_factory(updates="patch")
    good = catalog_rows(20)
    _aged(write_catalog(good))
    token_file = tmp_path / "console_token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    listen = closed_port_url().removeprefix("http://")
    extra = (
        "[schedule]\ninterval_minutes = 600\nrun_at_start = false\n"
        f'[daemon]\nlisten = "{listen}"\nconsole_token_file = "{token_file}"\n'
    )
    config = write_config(sandbox.url, extra=extra, name="shop.toml")
    assert run_cli("sync", "-c", str(config)).returncode == 0
    before = _prices(sandbox)
    cents = [{**r, "Price": str(Decimal(r["Price"]) * 100)} for r in good]
    _aged(write_catalog(cents))
    forced = run_cli("sync", "--json", "--force", "-c", str(config))
    assert json.loads(forced.stdout.splitlines()[-1])["run_id"] == 2, forced.stderr
    edited = next(p for p in sandbox.products(WORKSPACE) if p["sku"] == EDITED)
    sandbox.edit_product(edited["id"], {"price": 9.99}, WORKSPACE)
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
            url = f"http://{listen}"

            def up() -> bool:
                try:
                    return httpx.get(url + "/livez", timeout=1).status_code == 200
                except httpx.HTTPError:
                    return False

            wait_until(up, "the daemon's page")
            yield url, sandbox, err, before
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    assert TOKEN not in err.read_text(), "the token is never logged"


def _sign_in(browser: Any, url: str) -> None:
    browser.get(url + "/login")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "token").submit()
    wait_until(lambda: browser.current_url == url + "/", "signed in")


def test_a_signed_in_operator_undoes_a_run_from_the_page_and_the_cms_is_back(
    shop: tuple[str, Sandbox, Path, dict[str, Decimal]], browser: Any
) -> None:
    url, sandbox, log, before = shop
    browser.get(url + "/workspaces/shop")
    browser.find_element(By.LINK_TEXT, "2").click()  # the runs table links each run
    wait_until(lambda: browser.current_url.endswith("/workspaces/shop/runs/2"), "run 2's page")
    assert console_errors(browser) == []
    assert browser.find_element(By.ID, "run-products").text == "20"
    assert browser.find_elements(By.ID, "undo-run") == [], "not signed in: no undo"

    # a product's story, from the run's page
    browser.find_element(By.LINK_TEXT, "SKU-00001").click()
    assert shown(browser, "#product-key").text == "SKU-00001"
    assert "→" in browser.find_element(By.ID, "history").text
    assert console_errors(browser) == []

    _sign_in(browser, url)
    browser.get(url + "/workspaces/shop/runs/2")
    shown(browser, "#undo-run").click()
    preview = shown(browser, "#preview-totals").text
    assert preview.startswith("19 would go back") and "1 left" in preview, preview
    assert sandbox.stats().writes_committed == 40, "the preview wrote nothing"
    screenshot(browser, "console-undo-preview.png")
    assert console_errors(browser) == []
    shown(browser, "#confirm-undo").click()
    assert "handed to the daemon" in shown(browser, ".notice").text

    def back() -> bool:
        prices = _prices(sandbox)
        return all(prices[k] == v for k, v in before.items() if k != EDITED)

    wait_until(back, "the CMS back as it was")
    assert _prices(sandbox)[EDITED] == Decimal("9.99"), "the product edited since is left"
    assert sandbox.stats().writes_committed == 40 + 19, "nothing else written"

    def undone() -> bool:
        browser.get(url + "/workspaces/shop/runs/2")
        return "run 3" in browser.find_element(By.ID, "undos").text

    wait_until(undone, "run 2's page names its undo")
    assert any(e.get("event") == "daemon.undo.finished" for e in events(log))

    # the search box finds the product left, whose story names the undo
    browser.get(url + "/workspaces/shop")
    box = browser.find_element(By.ID, "key")
    box.send_keys(EDITED)
    box.submit()
    assert shown(browser, "#product-key").text == EDITED
    assert console_errors(browser) == []


def test_anonymous_and_wrong_csrf_undos_change_nothing(
    shop: tuple[str, Sandbox, Path, dict[str, Decimal]], browser: Any
) -> None:
    url, sandbox, log, _before = shop
    target = f"{url}/workspaces/shop/runs/2/undo"
    assert httpx.post(target, data={"confirm": "1"}).status_code == 401
    _sign_in(browser, url)
    session = {c["name"]: c["value"] for c in browser.get_cookies()}["skuferry_session"]
    cookie = {"Cookie": f"skuferry_session={session}"}
    wrong = httpx.post(target, data={"confirm": "1", "csrf": "not-it"}, headers=cookie)
    assert wrong.status_code == 403
    missing = httpx.post(target, data={"confirm": "1"}, headers=cookie)
    assert missing.status_code == 403
    # the page's own form, its session gone: refused in the browser too
    browser.get(url + "/workspaces/shop/runs/2")
    button = shown(browser, "#undo-run")
    browser.delete_all_cookies()
    button.click()
    assert "sign in first" in shown(browser, ".problem").text
    time.sleep(0.5)  # had anything been queued, the daemon would have started it by now
    said = {e.get("event") for e in events(log)}
    assert "console.action.refused" in said
    assert not said & {"console.undo", "daemon.undo.queued", "daemon.undo.finished"}
    assert sandbox.stats().writes_committed == 40, "nothing was written"
