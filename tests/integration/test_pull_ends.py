"""A pull never ends early in silence (issue 18, items 3 and 4), as a user meets it: the
CLI, a config file, the test PIM server (skuferry/sandbox/pim.py) as the source and the
sandbox as the CMS.

- An OData v4 API (``value``, an absolute ``"@odata.nextLink"``, 250 items over 3
  pages) arrives whole with ``next_path = '"@odata.nextLink"'``; the unquoted key is a
  config error (exit 2) before any request, never a pull of page 1 alone.
- An API that announces a total (body or WooCommerce headers) and then stops early,
  and a next-link API whose full page has no next link after pages that had one:
  exit 3 against a catalog synced before with ``[gone] action = "patch"``, with
  nothing archived, nothing written and nothing in the mirror changed.
- The same totals, met, end the walk exactly: no extra request, exit 0; an
  incremental pull is measured against the total its filtered answer announces.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from skuferry.sandbox import Sandbox
from skuferry.sandbox.pim import GeneratedCatalog, PimServer
from tests.integration.conftest import FAST, KEY, WORKSPACE, assert_each_once

pytestmark = pytest.mark.integration

Run = Callable[..., subprocess.CompletedProcess[str]]
N = 250
KEYS = [f"SKU-{i:06d}" for i in range(1, N + 1)]


def _config(tmp_path: Path, api: str, source: str) -> Path:
    path = tmp_path / "skuferry.toml"
    path.write_text(
        f"""\
[api]
base_url = "{api}"
api_key = "{KEY}"

[source]
type = "http"
{source}

[mapping]
key = "sku"
[mapping.fields]
sku = "sku"
name = "name"
price = {{ column = "price", type = "decimal" }}
stock = {{ column = "stock", type = "integer" }}

[budget]
read_per_minute = {FAST}
write_per_minute = {FAST}

[gone]
action = "patch"
patch = {{ status = "archived", stock = 0 }}

[safety]
max_gone_ratio = 1.0   # the guard would not stop an archive of the missing pages

[state]
path = "state/skuferry.db"
""",
        encoding="utf-8",
    )
    path.chmod(0o600)
    return path


def _summary(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    last = result.stdout.strip().splitlines()[-1]
    parsed: dict[str, Any] = json.loads(last)
    return parsed


def _status(run_cli: Run, config: Path) -> dict[str, int]:
    result = run_cli("status", "--json", "--config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    products: dict[str, int] = json.loads(result.stdout)["products"]
    return products


@pytest.fixture
def pim() -> Iterator[PimServer]:
    with PimServer(GeneratedCatalog(N)) as server:
        yield server


def _synced(run_cli: Run, config: Path, sandbox: Sandbox) -> None:
    """The first run, from a healthy API: every product created once."""
    first = run_cli("sync", "--json", "--config", str(config))
    assert first.returncode == 0, first.stdout + first.stderr
    assert _summary(first)["created"] == N
    assert_each_once(sandbox, KEYS)


def _refused_without_a_trace(
    run_cli: Run, config: Path, sandbox: Sandbox, *, says: str
) -> subprocess.CompletedProcess[str]:
    """A run against the broken API: exit 3, nothing archived, written or marked."""
    writes = sandbox.stats().requests_by_key[KEY].get("write", 0)
    result = run_cli("sync", "--json", "--config", str(config))
    assert result.returncode == 3, result.stdout + result.stderr
    assert says in result.stderr, result.stderr
    assert "nothing is marked gone" in result.stderr
    assert sandbox.stats().requests_by_key[KEY].get("write", 0) == writes, "no writes"
    assert sandbox.updates_received(WORKSPACE) == [], "nothing archived"
    assert_each_once(sandbox, KEYS)
    assert all(p.get("status") != "archived" for p in sandbox.products(WORKSPACE))
    assert _status(run_cli, config) == {"synced": N}, "the mirror marks nothing gone"
    return result


# -- OData: the quoted key finds the link; the unquoted one is a config error ---------------

ODATA = """\
url = "{url}?$count={count}"
headers = {{ Prefer = "odata.maxpagesize=100" }}
items_path = "value"
next_path = {next_path}
"""


@pytest.mark.parametrize("count", ["false", "true"])  # with and without "@odata.count"
def test_an_odata_api_arrives_whole_with_its_next_link_quoted(
    tmp_path: Path, sandbox: Sandbox, pim: PimServer, run_cli: Run, count: str
) -> None:
    source = ODATA.format(url=pim.url("odata"), count=count, next_path="""'"@odata.nextLink"'""")
    config = _config(tmp_path, sandbox.url, source)

    result = run_cli("sync", "--json", "--config", str(config))

    assert result.returncode == 0, result.stdout + result.stderr
    assert _summary(result)["created"] == N
    assert_each_once(sandbox, KEYS)
    assert len(pim.requests) == 3, "250 items over 3 pages of 100"
    assert "$skiptoken=200" in pim.requests[-1].path or "%24skiptoken=200" in pim.requests[-1].path


def test_the_unquoted_odata_next_link_is_a_config_error_before_any_request(
    tmp_path: Path, sandbox: Sandbox, pim: PimServer, run_cli: Run
) -> None:
    source = ODATA.format(url=pim.url("odata"), count="false", next_path='"@odata.nextLink"')
    config = _config(tmp_path, sandbox.url, source)

    result = run_cli("sync", "--json", "--config", str(config))

    assert result.returncode == 2, result.stdout + result.stderr
    assert "at 'source.next_path': not a valid JMESPath expression" in result.stderr
    assert """'"@odata.nextLink"'""" in result.stderr, "the hint shows the quoted form"
    assert pim.requests == [], "nothing pulled"
    assert sandbox.stats().products.get(WORKSPACE, 0) == 0
    checked = run_cli("check", "--config", str(config))
    assert checked.returncode == 2, checked.stdout + checked.stderr


# -- announced totals, not met: exit 3, nothing gone ---------------------------------------

ANNOUNCING = {
    "page, total pages in the body": (
        "page",
        'pagination = "page"\nitems_path = "items"\ntotal_pages_path = "meta.pages"',
        "announced 3 page(s) (total_pages_path 'meta.pages')",
    ),
    "page, total in the body": (
        "page",
        'pagination = "page"\nitems_path = "items"\ntotal_path = "meta.total"',
        "announced 250 record(s) (total_path 'meta.total')",
    ),
    "offset, total in the body": (
        "offset",
        'pagination = "offset"\nitems_path = "items"\ntotal_path = "total"',
        "announced 250 record(s) (total_path 'total')",
    ),
    "woocommerce, total pages header": (
        "woo",
        'pagination = "page"\nsize_param = "per_page"\ntotal_pages_header = "X-WP-TotalPages"',
        "announced 3 page(s) (total_pages_header X-WP-TotalPages)",
    ),
    "woocommerce, total header": (
        "woo",
        'pagination = "page"\nsize_param = "per_page"\ntotal_header = "X-WP-Total"',
        "announced 250 record(s) (total_header X-WP-Total)",
    ),
    "odata, @odata.count": (
        "odata",
        """items_path = "value"\nnext_path = '"@odata.nextLink"'\n"""
        'headers = { Prefer = "odata.maxpagesize=100" }',
        "announced 250 record(s) (@odata.count)",
    ),
}


@pytest.mark.parametrize("case", list(ANNOUNCING))
def test_an_api_that_announces_a_total_and_stops_early_fails_and_archives_nothing(
    tmp_path: Path, sandbox: Sandbox, pim: PimServer, run_cli: Run, case: str
) -> None:
    style, options, says = ANNOUNCING[case]
    url = pim.url(style) + ("?$count=true" if style == "odata" else "")
    config = _config(tmp_path, sandbox.url, f'url = "{url}"\npage_size = 100\n{options}')
    _synced(run_cli, config, sandbox)

    pim.ends_early_at = 2  # page 2 on: nothing, yet the totals still count 250
    _refused_without_a_trace(run_cli, config, sandbox, says=says)

    pim.ends_early_at = None  # mended: the next run resumes, nothing to do
    again = run_cli("sync", "--json", "--config", str(config))
    assert again.returncode == 0, again.stdout + again.stderr
    assert (_summary(again)["unchanged"], _summary(again)["archived"]) == (N, 0)


# -- a full page without a next link after pages that had one: exit 3 -----------------------


def test_a_full_page_without_a_next_link_after_linked_pages_fails(
    tmp_path: Path, sandbox: Sandbox, pim: PimServer, run_cli: Run
) -> None:
    source = f'url = "{pim.url("hal")}?limit=100"\nitems_path = "_embedded.items"'
    config = _config(tmp_path, sandbox.url, source)
    _synced(run_cli, config, sandbox)

    pim.ends_early_at = 3  # page 2 comes back full, without the next link page 1 had
    _refused_without_a_trace(run_cli, config, sandbox, says="page 2 came back full (100 records")
    assert len(pim.requests) == 3 + 2


def test_a_short_last_page_without_a_next_link_is_the_end(
    tmp_path: Path, sandbox: Sandbox, run_cli: Run
) -> None:
    with PimServer(GeneratedCatalog(N)) as pim:  # pages of 100, 100, 50
        source = f'url = "{pim.url("hal")}?limit=100"\nitems_path = "_embedded.items"'
        config = _config(tmp_path, sandbox.url, source)
        _synced(run_cli, config, sandbox)
        pim.catalog = GeneratedCatalog(N - 10)  # ten products left the PIM: they go
        result = run_cli("sync", "--json", "--config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    assert _summary(result)["archived"] == 10


# -- totals met: the walk ends exactly; an incremental pull counts its filtered total ----


def test_woocommerce_header_totals_end_the_walk_without_an_extra_request(
    tmp_path: Path, sandbox: Sandbox, run_cli: Run
) -> None:
    with PimServer(GeneratedCatalog(200)) as pim:  # exactly two full pages
        source = (
            f'url = "{pim.url("woo")}"\npagination = "page"\nsize_param = "per_page"\n'
            'page_size = 100\ntotal_pages_header = "X-WP-TotalPages"\n'
            'total_header = "X-WP-Total"'
        )
        config = _config(tmp_path, sandbox.url, source)
        result = run_cli("sync", "--json", "--config", str(config))
        assert result.returncode == 0, result.stdout + result.stderr
        assert _summary(result)["created"] == 200
        assert [r.path for r in pim.requests] == [
            "/woo/products?per_page=100&page=1",
            "/woo/products?per_page=100&page=2",
        ]


def test_an_incremental_pull_is_measured_against_its_filtered_total(
    tmp_path: Path, sandbox: Sandbox, run_cli: Run
) -> None:
    catalog = GeneratedCatalog(N)
    with PimServer(catalog) as pim:
        source = (
            f'url = "{pim.url("woo")}"\npagination = "page"\nsize_param = "per_page"\n'
            'page_size = 100\ntotal_header = "X-WP-Total"\nsince_param = "updated_since"'
        )
        config = _config(tmp_path, sandbox.url, source)
        _synced(run_cli, config, sandbox)
        catalog.touch([4, 140], datetime.now(UTC).replace(year=2099))

        result = run_cli("sync", "--json", "--config", str(config))

        assert result.returncode == 0, result.stdout + result.stderr
        summary = _summary(result)
        assert (summary["pull"], summary["updated"], summary["archived"]) == (
            "incremental",
            2,
            0,
        )
        last = pim.requests[-1].path
        assert "updated_since=" in last and "page=1" in last, "one filtered page of 2"
