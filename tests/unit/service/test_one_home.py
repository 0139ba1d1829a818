"""The daemon and the fleet share one home for each of these; a second copy fails here.

- the signals: ``service/signals.py`` installs them (SIGTERM/SIGINT stop, SIGHUP reloads
  or rescans) for ``run --config`` and ``run --workspaces`` alike;
- the HTTP side: ``http_endpoint.Endpoint`` (the public-address warning, the routes),
  ``hook_answer`` (a hook's size checked), ``console.app.page`` (the page mounted);
- the metrics: families, never text, are put together (``metrics.exposition``); an
  exposition is parsed only to carry the textfile's counters on (``parse_samples``).

Each rule is asked of the source, then held by behaviour: the fleet's hooks answer 413
to a body without a usable length as the daemon's do.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import skuferry
from skuferry.service import fleet, hooks_http
from skuferry.service.http_app import Request

SERVICE = Path(skuferry.__file__).parent / "service"


def homes(pattern: str) -> list[str]:
    found = re.compile(pattern)
    return sorted(
        str(path.relative_to(SERVICE))
        for path in SERVICE.rglob("*.py")
        if found.search(path.read_text(encoding="utf-8"))
    )


@pytest.mark.parametrize(
    ("what", "pattern", "home"),
    [
        ("signal handlers", r"signal\.signal\(", ["signals.py"]),
        ("the page mounted", r"Console\.of\(", ["console/app.py"]),
        ("a hook's size checked", r"int\(length\) >", ["http_endpoint.py"]),
        ("an HTTP server built", r"HttpServer\(", ["http_endpoint.py"]),
        ("an exposition parsed", r"text_string_to_metric_families", ["metrics.py"]),
        ("an exposition rendered", r"generate_latest\(", ["metrics.py"]),
    ],
)
def test_each_has_one_home(what: str, pattern: str, home: list[str]) -> None:
    assert homes(pattern) == home, what


def test_the_fleet_s_hooks_refuse_a_body_without_a_usable_length(tmp_path: Path) -> None:
    desk = hooks_http.Desk(b"secret", on_keys=len, on_run=lambda: None)
    fleet_ = fleet.Fleet(tmp_path, job=lambda *a, **k: None)  # type: ignore[arg-type]
    fleet_.members["acme"] = fleet.Member("acme", tmp_path / "acme.toml", None, desk=desk)
    fleet_.members["acme"].daemon = object()  # type: ignore[assignment]  # running

    def post(headers: dict[str, str]) -> int:
        request = Request(
            "POST", "/hooks/acme/sync", "", headers, b"{}", {"name": "acme", "verb": "sync"}
        )
        return fleet_.hook(request).status

    assert post({}) == 413, "no Content-Length (chunked): refused"
    assert post({"content-length": str(hooks_http.MAX_BODY_BYTES + 1)}) == 413
    assert post({"content-length": "2"}) == 401, "within the limit: the signature is next"
