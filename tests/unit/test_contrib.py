"""The shipped Prometheus alerts and Grafana dashboard: valid, tested, and about real metrics.

promtool comes with Debian's ``prometheus`` package (``.ci/run`` installs it); the
promtool tests skip with that hint when it is missing.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from skuferry.models import RunSummary
from skuferry.service import metrics
from skuferry.service.freshness import Freshness
from skuferry.service.metrics import RunOutcome

CONTRIB = Path(__file__).resolve().parents[2] / "contrib"
ALERTS = CONTRIB / "prometheus" / "alerts.yml"
DASHBOARD = CONTRIB / "grafana" / "skuferry.json"
METRIC = re.compile(r"\bskuferry_[a-z_]+\b")


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool not found (apt-get install prometheus)")
    return found


def exposed_names() -> set[str]:
    """Every sample name skuferry can expose, with every optional family present."""
    outcome = RunOutcome.from_summary(RunSummary(), duration_s=1.0, finished_at=100.0)
    text = metrics.render(
        {},
        outcome,
        {"synced": 1, "rejected": 1},
        Freshness(oldest_unsynced_change=50.0, last_full_pull=40.0),
        {"read": 300, "write": 60},
    )
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.mark.integration
def test_promtool_checks_the_rules() -> None:
    done = subprocess.run(
        [promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.integration
def test_promtool_unit_tests_of_the_rules_pass() -> None:
    done = subprocess.run(
        [promtool(), "test", "rules", "alerts.test.yml"],
        cwd=ALERTS.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rules_query_only_metrics_skuferry_exposes() -> None:
    used = set(METRIC.findall(ALERTS.read_text(encoding="utf-8")))
    assert used, "the rules name skuferry metrics"
    assert used <= exposed_names(), f"unknown metrics: {sorted(used - exposed_names())}"


def _expressions(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        found += [node["query"]] if isinstance(node.get("query"), str) else []
        return found + [e for value in node.values() for e in _expressions(value)]
    if isinstance(node, list):
        return [e for item in node for e in _expressions(item)]
    return []


def test_the_dashboard_is_json_and_queries_only_metrics_skuferry_exposes() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    titles = {panel["title"] for panel in dashboard["panels"]}
    assert {
        "Products by state",
        "Writes per minute against the budget",
        "Run durations",
        "Rejections",
    } <= titles
    used = {name for expr in _expressions(dashboard) for name in METRIC.findall(expr)}
    assert used <= exposed_names(), f"unknown metrics: {sorted(used - exposed_names())}"
    assert "skuferry_budget_per_minute" in used


def test_the_docs_point_to_the_shipped_rules_instead_of_writing_them_again() -> None:
    pages = [CONTRIB.parent / "README.md", *sorted((CONTRIB.parent / "docs").rglob("*.md"))]
    texts = {page.name: page.read_text(encoding="utf-8") for page in pages}
    assert "contrib/prometheus/alerts.yml" in texts["monitoring.md"]
    for name, text in texts.items():
        written_twice = re.findall(r"^\s*-?\s*(alert:|expr:)", text, flags=re.MULTILINE)
        assert written_twice == [], f"{name}: alert rules belong in contrib/prometheus/alerts.yml"


def test_the_rejection_alert_sees_rows_rejected_at_the_source() -> None:
    rules = ALERTS.read_text(encoding="utf-8")
    assert "skuferry_rows_rejected" in rules
    assert {"skuferry_rows_rejected", "skuferry_rows_rejected_total"} <= exposed_names()


def test_the_dashboard_has_a_workspace_variable_that_every_query_honours() -> None:
    """Many daemons, one per workspace ([metrics] labels): pick one, several or all."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    workspace = variables["workspace"]
    assert workspace["query"] == "label_values(skuferry_runs_total, workspace)"
    assert workspace["includeAll"] and workspace["multi"]
    assert workspace["allValue"] == ".*"  # All includes daemons without the label
    assert "$workspace" in variables["instance"]["query"]  # instances of the chosen workspaces
    queries = [e for e in _expressions(dashboard["panels"]) if "skuferry_" in e]
    assert queries
    for expr in queries:
        for selector in re.findall(r"skuferry_[a-z_]+(\{[^}]*\})?", expr):
            assert 'workspace=~"$workspace"' in selector, expr


def test_the_alerts_keep_the_workspace_label_and_name_it() -> None:
    rules = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    for rule in (r for group in rules["groups"] for r in group["rules"]):
        summary = rule["annotations"]["summary"]
        assert "{{ with $labels.workspace }}" in summary, rule["alert"]
        # an aggregation that keeps only some labels would drop the workspace
        assert " by (" not in rule["expr"] and "by(" not in rule["expr"], rule["alert"]
