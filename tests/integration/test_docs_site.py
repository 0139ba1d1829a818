"""The built documentation site works opened from disk (``file://``), with no network.

Every link between pages lands on a page file (not on a folder, which a browser shows
as a directory listing from disk), and the search needs neither a server nor a CDN.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
_REF = re.compile(r"""(?:href|src)="([^"]+)\"""")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
    )
    return out


def _local_refs(page: Path) -> list[str]:
    refs = []
    for ref in _REF.findall(page.read_text(encoding="utf-8")):
        parts = urlsplit(ref)
        if parts.scheme or ref.startswith(("#", "//", "mailto:")):
            continue
        refs.append(unquote(parts.path))
    return [ref for ref in refs if ref]


def test_every_link_between_pages_lands_on_a_file(site: Path) -> None:
    pages = sorted(p for p in site.rglob("*.html") if p.name != "404.html")  # served only
    assert len(pages) > 30
    broken = []
    for page in pages:
        for ref in _local_refs(page):
            target = (page.parent / ref).resolve()
            if not target.is_file():
                broken.append(f"{page.relative_to(site)} -> {ref}")
    assert broken == []


def test_search_and_scripts_need_no_server_and_no_network(site: Path) -> None:
    assert (site / "search" / "search_index.js").is_file()  # the index as a script
    index = (site / "index.html").read_text(encoding="utf-8")
    scripts = re.findall(r'<script[^>]*src="([^"]+)"', index)
    assert scripts, "no scripts found"
    assert [s for s in scripts if urlsplit(s).scheme] == []  # nothing from a CDN
    assert "assets/iframe-worker/shim.js" in scripts


def test_no_page_loads_anything_from_the_network_and_walks_is_in_the_nav(site: Path) -> None:
    """Issue 40 item 23: web fonts from a CDN (a failed request offline); walks.md unlisted."""
    remote = re.compile(r"""<link[^>]+href="(?:https?:)?//[^"]+\"""")
    for page in sorted(site.rglob("*.html")):
        assert remote.findall(page.read_text(encoding="utf-8")) == [], page.name
    security = (site / "security.html").read_text(encoding="utf-8")  # no link in its text
    assert re.search(r'<a href="walks.html" class="md-nav__link', security), "in every page's nav"
