"""Source paths are JMESPath, checked per key when the config loads (config/expressions.py,
sources/paths.py); the end-of-pull evidence rules (sources/ends.py), pure and over respx."""

from __future__ import annotations

import random
import re
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from skuferry.config.load import settings_from_dict
from skuferry.config.schema import HttpSourceSettings
from skuferry.errors import ConfigError, SourceError
from skuferry.models import RawRecord
from skuferry.sources.ends import Announced, EndProof, Totals
from skuferry.sources.http import HttpSource
from skuferry.sources.paths import SourcePath
from skuferry.sources.wiring import Wiring

ROOT = Path(__file__).resolve().parents[3]
PATH_KEYS = ("items_path", "next_path", "cursor_path", "total_path", "total_pages_path")
URL = "https://pim.example.test/api/products"


def load(**source: Any) -> None:
    settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k"},
            "source": {"type": "http", "url": URL, **source},
            "state": {"path": "/tmp/unused.db"},
        }
    )


def problems(**source: Any) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(**source)
    return [p.removeprefix("<dict>: ") for p in info.value.problems]


# -- one path language, checked per key --------------------------------------------------


@pytest.mark.parametrize("key", PATH_KEYS)
def test_a_path_that_does_not_compile_is_a_config_error_naming_its_key(key: str) -> None:
    found = problems(**{key: "meta.[oops"})
    assert len(found) == 1
    assert found[0].startswith(f"at 'source.{key}': not a valid JMESPath expression")


@pytest.mark.parametrize("key", PATH_KEYS)
def test_the_unquoted_odata_key_is_a_config_error_with_the_quoted_form(key: str) -> None:
    (found,) = problems(**{key: "@odata.nextLink"})
    assert found.startswith(f"at 'source.{key}': not a valid JMESPath expression")
    assert """'"@odata.nextLink"'""" in found, found


def test_a_dotted_key_with_a_dash_is_shown_quoted_part_by_part() -> None:
    (found,) = problems(next_path="links.next-page")
    assert """'links."next-page"'""" in found


def test_every_path_problem_is_reported_at_once() -> None:
    found = problems(items_path="a[", next_path="@odata.nextLink", total_path="x y")
    assert [p.split(":")[0] for p in found] == [
        "at 'source.items_path'",
        "at 'source.next_path'",
        "at 'source.total_path'",
    ]


@pytest.mark.parametrize(
    ("name", "value"), [("total_header", "X WP Total"), ("total_pages_header", "")]
)
def test_a_header_setting_must_be_a_header_name(name: str, value: str) -> None:
    (found,) = problems(**{name: value})
    assert found.startswith(f"at 'source.{name}':")


def test_a_hand_built_settings_object_with_a_bad_path_fails_when_the_source_opens() -> None:
    settings = HttpSourceSettings.model_construct(
        **{**HttpSourceSettings(type="http", url=URL).model_dump(), "next_path": "@odata.x"}
    )
    with pytest.raises(ConfigError, match=r"at 'source\.next_path'"):
        HttpSource(settings)


def _shipped_source_paths() -> list[tuple[str, str, str]]:
    """(where, key, value) of every source path in the examples, the docs and defaults."""
    found = []
    tomls = [ROOT / "config.example.toml", *sorted((ROOT / "examples").glob("*.toml"))]
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for file in [*tomls, *pages]:
        text = file.read_text(encoding="utf-8")
        source = tomllib.loads(text).get("source", {}) if file in tomls else {}
        found += [(file.name, k, v) for k, v in source.items() if k in PATH_KEYS]
        # commented examples: total_pages_path = "meta.pages" and the like
        for key, value in re.findall(rf"({'|'.join(PATH_KEYS)}) = \"([^\"]*)\"", text):
            found.append((f"{file.name} (comment)", key, value))
    for key in PATH_KEYS:
        default = HttpSourceSettings.model_fields[key].default
        if isinstance(default, str):
            found.append(("default", key, default))
    return found


BODY = {
    "_embedded": {"items": [{"sku": "A"}]},
    "_links": {"next": {"href": "/p?page=2"}},
    "meta": {"pages": 3, "total": 250, "next_cursor": "c2"},
    "items": [{"sku": "A"}],
    "data": [{"sku": "A"}],
    "next_cursor": "c2",
    "total": 250,
    "total_count": 250,  # Magento (docs/source-paths.md)
    "value": [{"sku": "A"}],
}


def test_every_shipped_dotted_path_keeps_its_meaning() -> None:
    shipped = _shipped_source_paths()
    assert {v for _, _, v in shipped} >= {"_embedded.items", "_links.next.href", "meta.pages"}
    for where, key, value in shipped:
        HttpSourceSettings.model_validate({"type": "http", "url": URL, key: value})
        node: Any = BODY
        for part in value.split(".") if value else ():
            node = node[part]  # the dotted reading: walk the keys
        assert SourcePath(value, key=key).find(BODY) == node, (where, key, value)


@pytest.mark.parametrize(
    ("text", "body", "expected"),
    [
        ("", [1, 2], [1, 2]),  # "" is the body itself
        ("@", [1, 2], [1, 2]),
        ("_embedded.items", {"_embedded": {"items": [1]}}, [1]),
        (
            '"@odata.nextLink"',
            {"@odata.nextLink": "https://x/p?$skiptoken=1"},
            "https://x/p?$skiptoken=1",
        ),
        ('meta."next-page"', {"meta": {"next-page": 2}}, 2),
        ("data.products.edges[].node", {"data": {"products": {"edges": [{"node": 1}]}}}, [1]),
        ("missing.key", {"other": 1}, None),
        ("items", [1, 2], None),  # a key into a list finds nothing
    ],
)
def test_source_paths_select_as_jmespath_does(text: str, body: Any, expected: Any) -> None:
    assert SourcePath(text, key="source.items_path").find(body) == expected


# -- the end-of-pull evidence, pure --------------------------------------------------------


def walk(pages: list[tuple[int, Announced, bool]], *, links: bool = True) -> EndProof:
    proof = EndProof("http pim", full_page_rule=links)
    for count, said, has_next in pages:
        proof.page(count, said, has_next=has_next)
    return proof


NOTHING = Announced()


def test_an_announced_total_that_was_not_reached_fails() -> None:
    said = Announced(records=250, records_from="total_path 'meta.total'")
    proof = walk([(100, said, True), (0, NOTHING, False)])
    with pytest.raises(SourceError, match=r"announced 250 record.*total_path 'meta.total'.*100"):
        proof.check()


def test_announced_pages_that_were_not_read_fail() -> None:
    said = Announced(pages=3, pages_from="total_pages_header X-WP-TotalPages")
    with pytest.raises(
        SourceError, match=r"announced 3 page.*X-WP-TotalPages.*nothing is marked gone"
    ):
        walk([(100, said, False), (0, said, False)]).check()


def test_the_latest_announcement_counts() -> None:
    walk([(100, Announced(records=250), True), (90, Announced(records=190), False)]).check()
    with pytest.raises(SourceError, match="announced 260"):
        walk([(100, Announced(records=250), True), (90, Announced(records=260), False)]).check()


def test_more_records_than_announced_is_no_evidence_of_loss() -> None:
    walk([(100, Announced(records=90), False)]).check()


def test_a_full_page_without_a_next_link_after_linked_pages_fails() -> None:
    proof = walk([(100, NOTHING, True), (100, NOTHING, True), (100, NOTHING, False)])
    with pytest.raises(SourceError, match=r"page 3 came back full \(100 records"):
        proof.check()


@pytest.mark.parametrize(
    "pages",
    [
        [(100, NOTHING, True), (40, NOTHING, False)],  # a short last page: the end
        [(100, NOTHING, True), (0, NOTHING, False)],  # an empty last page
        [(100, NOTHING, False)],  # one page: nothing to compare it with
        [(100, NOTHING, True), (100, Announced(records=200), False)],  # a total, met
    ],
)
def test_no_evidence_or_met_evidence_keeps_the_walks_own_end(
    pages: list[tuple[int, Announced, bool]],
) -> None:
    walk(pages).check()


def test_the_full_page_rule_is_for_next_links_only() -> None:
    walk([(100, NOTHING, True), (100, NOTHING, False)], links=False).check()


def test_totals_read_the_body_then_the_header_then_odata_count() -> None:
    totals = Totals(
        records_path=SourcePath("meta.total", key="source.total_path"),
        records_header="X-WP-Total",
        pages_path=None,
        pages_header="X-WP-TotalPages",
    )
    headers = {"X-WP-Total": "7", "X-WP-TotalPages": "2"}
    assert totals.read({"meta": {"total": 9}}, headers, where="w") == Announced(
        9, "total_path 'meta.total'", 2, "total_pages_header X-WP-TotalPages"
    )
    assert totals.read({}, headers, where="w").records_from == "total_header X-WP-Total"
    plain = Totals(records_path=None, records_header=None, pages_path=None, pages_header=None)
    assert plain.read({"@odata.count": 250}, {}, where="w").records == 250
    assert plain.read([1, 2], {}, where="w") == NOTHING
    with pytest.raises(SourceError, match=r"w: total_header X-WP-Total is 'many', not a count"):
        totals.read({}, {"X-WP-Total": "many"}, where="w")


# -- the http source weighs the evidence (respx) -------------------------------------------


def source(router: respx.MockRouter, **options: Any) -> HttpSource:
    settings = HttpSourceSettings.model_validate({"type": "http", "url": URL, **options})
    return HttpSource(
        settings,
        Wiring(
            transport=httpx.MockTransport(router.handler),
            sleep=lambda _s: None,
            rng=random.Random(1),
        ),
    )


def pulled(src: HttpSource) -> list[str]:
    return [str(r.fields["sku"]) for r in src.records() if isinstance(r, RawRecord)]


def skus(first: int, n: int) -> list[dict[str, str]]:
    return [{"sku": f"S{i}"} for i in range(first, first + n)]


@pytest.fixture
def router() -> respx.MockRouter:
    return respx.MockRouter(assert_all_called=False, assert_all_mocked=True)


def test_woocommerce_headers_stop_the_page_walk_exactly(router: respx.MockRouter) -> None:
    headers = {"X-WP-Total": "200", "X-WP-TotalPages": "2"}
    for page in (1, 2):
        router.get(URL, params={"page": str(page)}).respond(
            json=skus(page * 100, 100), headers=headers
        )
    src = source(
        router,
        pagination="page",
        size_param="per_page",
        total_pages_header="X-WP-TotalPages",
        total_header="X-WP-Total",
    )
    assert len(pulled(src)) == 200
    assert router.calls.call_count == 2  # no third request for an empty page


def test_woocommerce_headers_announcing_more_than_arrived_fail(router: respx.MockRouter) -> None:
    headers = {"X-WP-Total": "250", "X-WP-TotalPages": "3"}
    router.get(URL, params={"page": "1"}).respond(json=skus(0, 100), headers=headers)
    router.get(URL, params={"page": "2"}).respond(json=[], headers=headers)
    src = source(router, pagination="page", size_param="per_page", total_header="X-WP-Total")
    with pytest.raises(SourceError, match=r"announced 250 record\(s\) \(total_header X-WP-Total\)"):
        pulled(src)


def test_a_total_lets_a_page_walk_go_on_past_a_page_the_api_capped(
    router: respx.MockRouter,
) -> None:
    for page in (1, 2, 3):  # 500 asked, 100 given (the API's own cap)
        body = {"items": skus(page * 100, 100 if page < 3 else 50), "total_count": 250}
        router.get(URL, params={"page": str(page)}).respond(json=body)
    src = source(
        router, pagination="page", page_size=500, items_path="items", total_path="total_count"
    )
    assert len(pulled(src)) == 250


@pytest.mark.parametrize("total", [None, "200"])
def test_a_page_that_repeats_the_one_before_fails_unless_a_total_ends_the_walk_first(
    router: respx.MockRouter, total: str | None
) -> None:
    # Magento serves its last page again for any page past the end
    body = {"items": skus(100, 100), **({"total_count": total} if total else {})}
    router.get(URL, params={"page": "1"}).respond(json={**body, "items": skus(0, 100)})
    router.get(URL).respond(json=body)
    src = source(router, pagination="page", items_path="items", total_path="total_count")
    if total is None:
        with pytest.raises(SourceError, match=r"page 3 repeats page 2.*total_count"):
            pulled(src)
    else:
        assert len(pulled(src)) == 200
        assert router.calls.call_count == 2


def test_an_odata_count_proves_the_end_without_configuration(router: respx.MockRouter) -> None:
    router.get(URL).respond(
        json={"@odata.context": "x", "@odata.count": 150, "value": skus(0, 100)}
    )
    src = source(router, items_path="value", next_path='"@odata.nextLink"')
    with pytest.raises(SourceError, match=r"announced 150 record\(s\) \(@odata.count\)"):
        pulled(src)


def test_a_next_link_the_path_does_not_find_fails_instead_of_ending(
    router: respx.MockRouter,
) -> None:
    router.get(URL).respond(
        json={"value": skus(0, 100), "@odata.nextLink": URL + "?$skiptoken=100"}
    )
    src = source(router, items_path="value")  # next_path left at _links.next.href
    with pytest.raises(SourceError, match=r"""set next_path = '"@odata.nextLink"'"""):
        pulled(src)
    one_page = source(router, items_path="value", pagination="none")
    with pytest.raises(SourceError, match=r"""set pagination = "next_link" and next_path"""):
        pulled(one_page)


def test_a_count_that_is_not_a_number_fails_the_pull(router: respx.MockRouter) -> None:
    router.get(URL).respond(json={"items": [], "meta": {"total": "lots"}})
    src = source(router, pagination="offset", items_path="items", total_path="meta.total")
    with pytest.raises(SourceError, match=r"total_path 'meta\.total' is 'lots', not a count"):
        pulled(src)
