"""The page's product and run pages: a product's story, a run's writes (filtered, paged),
and "Undo this run" behind sign-in and CSRF."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from skuferry.service.console import story as pages
from skuferry.sources import change_token
from tests.unit.service.test_console import (
    FakeWorkspace,
    app_of,
    get,
    post,
    sign_in,
    text,
)
from tests.unit.sync.test_undo import Shop, catalog


@pytest.fixture(autouse=True)
def no_racy_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(change_token, "RACY_S", 0.0)


@pytest.fixture
def shop(tmp_path: Path) -> Shop:
    shop = Shop(tmp_path)
    shop.export(catalog(60))
    shop.sync()
    shop.export(catalog(60, factor=100))
    shop.sync(force=True)  # run 2
    return shop


def test_the_product_page_tells_the_story_with_links_to_its_runs(shop: Shop) -> None:
    app = app_of(FakeWorkspace(shop.settings))
    page = get(app, "/workspaces/shop/products/SKU-0003")
    assert page.status == 200
    html = text(page)
    assert '<h1 id="product-key">SKU-0003</h1>' in html
    assert 'id="verdict">in step<' in html
    assert 'href="/workspaces/shop/runs/2"' in html and 'href="/workspaces/shop/runs/1"' in html
    assert "<code>price</code> 3.25 → 325.00" in html
    found = get(app, "/workspaces/shop/products?key=SKU-0003")  # the search box
    assert found.status == 200 and 'id="product-key">SKU-0003<' in text(found)


def test_an_unknown_key_is_a_404_with_the_keys_it_differs_from_by_case(shop: Shop) -> None:
    app = app_of(FakeWorkspace(shop.settings))
    page = get(app, "/workspaces/shop/products/sku-0003")
    assert page.status == 404
    assert 'href="/workspaces/shop/products/SKU-0003"' in text(page)


def test_a_key_with_a_slash_or_outside_ascii_has_a_page() -> None:
    assert pages.product_href("shop", "A/1") == "/workspaces/shop/products?key=A%2F1"
    assert pages.product_href("shop", "CAFÉ 1") == "/workspaces/shop/products/CAF%C3%89%201"
    assert pages._utf8("CAFÃ\x89") == "CAFÉ"


def test_the_run_page_lists_its_writes_filtered_and_paged_in_sqlite(shop: Shop) -> None:
    app = app_of(FakeWorkspace(shop.settings))
    html = text(get(app, "/workspaces/shop/runs/2"))
    assert 'id="run-products">60<' in html
    keys = re.findall(r'<tr data-key="([^"]+)">', html)
    assert keys == [f"SKU-{i:04d}" for i in range(50)]
    nxt = re.search(
        r'href="\?q=&amp;kind=&amp;outcome=&amp;after=([^"#]+)#writes" id="next-page"', html
    )
    assert nxt is not None and nxt[1] == "SKU-0049"
    second = text(get(app, f"/workspaces/shop/runs/2?after={nxt[1]}"))
    assert re.findall(r'<tr data-key="([^"]+)">', second) == [f"SKU-{i:04d}" for i in range(50, 60)]
    only = text(get(app, "/workspaces/shop/runs/2?q=0007&kind=update&outcome=ok"))
    assert re.findall(r'<tr data-key="([^"]+)">', only) == ["SKU-0007"]
    none = text(get(app, "/workspaces/shop/runs/2?kind=create"))
    assert "no write matches" in none
    assert get(app, "/workspaces/shop/runs/99").status == 404
    assert get(app, "/workspaces/shop/runs/x1").status == 404


def test_undo_is_offered_only_signed_in_and_refused_without_a_session_or_csrf(
    shop: Shop,
) -> None:
    ws = FakeWorkspace(shop.settings)
    app = app_of(ws)
    assert 'id="undo-run"' not in text(get(app, "/workspaces/shop/runs/2"))
    session, csrf = sign_in(app)
    assert 'id="undo-run"' in text(get(app, "/workspaces/shop/runs/2", cookie=session))
    target = "/workspaces/shop/runs/2/undo"
    assert post(app, target, {"confirm": "1", "csrf": csrf}).status == 401  # no session
    assert post(app, target, {"confirm": "1", "csrf": "x"}, cookie=session).status == 403
    assert post(app, target, {"confirm": "1"}, cookie=session).status == 403
    assert ws.undone == [], "nothing was asked of the daemon"
    done = post(app, target, {"confirm": "1", "csrf": csrf}, cookie=session)
    assert done.status == 303 and ws.undone == [2]
    ws.problems[2] = "run 2 cannot be undone: its history was pruned"
    shown = text(get(app, "/workspaces/shop/runs/2?undo=asked", cookie=session))
    assert "handed to the daemon" in shown and "its history was pruned" in shown


def test_the_workspace_page_links_refused_keys_and_runs_to_their_pages(shop: Shop) -> None:
    app = app_of(FakeWorkspace(shop.settings))
    html = text(get(app, "/workspaces/shop"))
    assert 'href="/workspaces/shop/runs/2"' in html
    assert 'id="find-product"' in html
