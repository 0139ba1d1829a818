"""``where`` knows every field an expression reads, whatever its spelling; a record that
lacks one, or reads one through a join it has no partner in, is held, never skipped."""

from __future__ import annotations

import contextlib
import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jmespath.exceptions
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skuferry.config.load import settings_from_dict
from skuferry.sync.engine import Adapters, run_once
from skuferry.sync.expressions.functions import Refused, compiler
from skuferry.sync.read.where import Lacking, Unpartnered, Where, reads
from tests.fakes import FakeRemote

Chain = tuple[str, ...]


@pytest.mark.parametrize(
    ("expression", "needs"),
    [
        ("enabled", [("enabled",)]),
        ("@.enabled", [("enabled",)]),
        ('@."enabled"', [("enabled",)]),
        ('"Variant SKU"', [("Variant SKU",)]),
        ("@ | enabled", [("enabled",)]),
        ("@.enabled == 'yes'", [("enabled",)]),
        ("pim.enabled == 'yes'", [("pim", "enabled")]),
        ("@.pim.enabled", [("pim", "enabled")]),
        ("pim | enabled", [("pim", "enabled")]),
        ("!(@.enabled)", [("enabled",)]),
        ("!@.enabled", []),  # (!@).enabled: JMESPath's `!` binds tighter than `.`
        ("a.b.c[0] == 'x'", [("a", "b", "c")]),
        ("a && @.b", [("a",), ("b",)]),
        ("contains(@.tags, 'x')", [("tags",)]),
        ("length(@.name) > `0`", [("name",)]),
        ("tags[0] == 'x'", [("tags",)]),
        ("variants[?sku == 'x'] | [0]", [("variants",)]),  # sku: of each element
        ("sort_by(variants, &price)", [("variants",)]),
        ("a.[b, c]", [("a", "b"), ("a", "c")]),
        ("{x: @.a}", [("a",)]),
        ("(status || 'draft') == 'active'", []),  # the left side of || may be missing
        ("@.status || @.state", [("state",)]),
        ("contains(tags, 'x') || b", [("b",), ("tags",)]),  # read inside the left side
        ("@", []),
        ("`true`", []),
    ],
)
def test_where_reads_each_field_whatever_the_spelling(expression: str, needs: list[Chain]) -> None:
    assert reads(expression) == needs


def _where(expression: str, joins: tuple[str, ...] = ()) -> Where:
    return Where(expression, compiler(), joins)


def test_a_record_lacking_a_field_read_as_at_dot_is_held_not_skipped() -> None:
    keep = _where("@.enabled == 'yes'")
    assert keep.keeps({"enabled": "yes"}) and not keep.keeps({"enabled": "no"})
    with pytest.raises(Lacking) as lacking:
        keep.keeps({"Enabled": "yes"})
    assert lacking.value.field == "enabled"


def test_a_field_read_through_a_join_without_a_partner_is_unknown() -> None:
    keep = _where("pim.enabled == 'yes'", joins=("pim",))
    assert keep.keeps({"pim": {"enabled": "yes"}})
    assert not keep.keeps({"pim": {"enabled": "no"}}), "a partner that says no: skipped"
    with pytest.raises(Unpartnered) as unknown:
        keep.keeps({"sku": "A", "pim": None})
    assert (unknown.value.field, unknown.value.join) == ("pim.enabled", "pim")
    assert str(unknown.value) == (
        "reads 'pim.enabled', but this record has no partner in join 'pim', so its value is "
        "unknown; held, not skipped (write pim.enabled || <value> to say what a missing "
        "partner means)"
    )
    # the user says what a missing partner means: the record is decided
    assert not _where("(pim.enabled || 'no') == 'yes'", joins=("pim",)).keeps({"pim": None})
    # `parent` is no join: a field under its null reads null
    assert not _where("parent.status == 'active'", joins=("pim",)).keeps({"parent": None})


# --- generated expressions: the generator knows which fields each one needs ----------------

NAMES = ("a", "b", "status", "Variant SKU", "pim")


@dataclass(frozen=True)
class Expr:
    text: str
    needs: frozenset[Chain]  # the fields a record must have
    path: Chain | None = None  # the field path this expression is, when it is one


def _segment(name: str, quoted: bool) -> str:
    return f'"{name}"' if quoted or " " in name else name


@st.composite
def paths(draw: st.DrawFn) -> Expr:
    chain = tuple(draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3)))
    quoted = draw(st.lists(st.booleans(), min_size=len(chain), max_size=len(chain)))
    text = ".".join(_segment(n, q) for n, q in zip(chain, quoted, strict=True))
    spelling = draw(st.sampled_from(["plain", "at", "pipe", "parens"]))
    text = {"plain": text, "at": f"@.{text}", "pipe": f"(@ | {text})", "parens": f"({text})"}[
        spelling
    ]
    return Expr(text, frozenset({chain}), chain)


literals = st.sampled_from(["'yes'", "`0`", "`true`", "`null`", "'x y'"]).map(
    lambda text: Expr(text, frozenset())
)


def _combine(inner: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    def binary(op: str) -> st.SearchStrategy[Expr]:
        return st.tuples(inner, inner).map(
            lambda ab: Expr(f"({ab[0].text} {op} {ab[1].text})", ab[0].needs | ab[1].needs)
        )

    def function(template: str) -> st.SearchStrategy[Expr]:
        return inner.map(lambda a: Expr(template.format(a.text), a.needs))

    or_ = st.tuples(inner, inner).map(
        lambda ab: Expr(
            f"({ab[0].text} || {ab[1].text})",
            # a path on the left may be missing: the right side is its fallback
            (frozenset() if ab[0].path is not None else ab[0].needs) | ab[1].needs,
        )
    )
    on_path = paths()
    return st.one_of(
        binary("=="),
        binary("!="),
        binary("&&"),
        or_,
        inner.map(lambda a: Expr(f"!({a.text})", a.needs)),
        function("to_string({})"),
        function("not_null({}, 'x')"),
        function("type({})"),
        st.tuples(inner, inner).map(
            lambda ab: Expr(f"[{ab[0].text}, {ab[1].text}]", ab[0].needs | ab[1].needs)
        ),
        on_path.map(lambda p: Expr(f"{p.text}[0]", p.needs)),
        on_path.map(lambda p: Expr(f"{p.text}[*].status", p.needs)),
        on_path.map(lambda p: Expr(f"{p.text}[?b == 'x']", p.needs)),
        on_path.map(lambda p: Expr(f"length({p.text}) > `1`", p.needs)),
    )


expressions = st.recursive(st.one_of(paths(), literals), _combine, max_leaves=8)


def _record(chains: frozenset[Chain]) -> dict[str, Any]:
    """A record holding every one of ``chains`` (a prefix of another is an object)."""
    record: dict[str, Any] = {}
    for chain in sorted(chains, key=len, reverse=True):
        node = record
        for name in chain[:-1]:
            node = node.setdefault(name, {})
        node.setdefault(chain[-1], "v")
    return record


def _keeps(keep: Where, record: dict[str, Any]) -> None:
    # a function given the wrong type: the expression's own problem, not ours
    with contextlib.suppress(jmespath.exceptions.JMESPathError, Refused):
        keep.keeps(record)


@settings(max_examples=400, deadline=None)
@given(expressions)
def test_where_knows_every_field_a_generated_expression_reads(expr: Expr) -> None:
    assert set(reads(expr.text)) == expr.needs, expr.text
    keep = _where(expr.text, joins=("pim",))
    whole = _record(expr.needs)
    _keeps(keep, whole)  # every field there: never lacking
    for chain in expr.needs:
        cut = copy.deepcopy(whole)
        node = cut
        for name in chain[:-1]:
            node = node[name]
        del node[chain[-1]]
        with pytest.raises(Lacking) as lacking:
            keep.keeps(cut)
        assert tuple(lacking.value.field.split(".")) in {
            c for c in expr.needs if c[: len(chain)] == chain
        }, expr.text
    through = {c for c in expr.needs if c[0] == "pim" and len(c) > 1}
    unpartnered = {**whole, "pim": None}
    if through:
        with pytest.raises(Unpartnered):
            keep.keeps(unpartnered)
    else:
        _keeps(keep, unpartnered)  # no field read through the join: decided as it is


def test_a_product_whose_record_lacks_a_field_read_as_at_dot_is_held_not_gone(
    tmp_path: Path,
) -> None:
    """Found 2: `@.enabled` was not seen as reading `enabled`, so a record without it was
    filtered out, and its product archived."""
    rows = [
        {"sku": "A", "name": "a", "enabled": "yes"},
        {"sku": "B", "name": "b", "enabled": "yes"},
    ]
    path = tmp_path / "products.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    settings = settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k-test"},
            "source": {"type": "jsonl", "path": "products.jsonl", "where": "@.enabled == 'yes'"},
            "mapping": {"key": "sku"},
            "state": {"path": "state.db"},
            "gone": {"action": "patch", "patch": {"status": "archived"}},
            "safety": {"max_gone_ratio": 1},
        },
        base_dir=tmp_path,
    )
    remote = FakeRemote()
    assert run_once(settings, adapters=Adapters(client=remote)).created == 2
    del rows[1]["enabled"]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    summary = run_once(settings, adapters=Adapters(client=remote))
    assert (summary.archived, summary.gone, summary.rejected) == (0, 0, 1)
    assert [p["key"] for p in summary.problems] == ["B"]
