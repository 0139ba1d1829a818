"""Optional monitoring pings (healthchecks.io, Cronitor, Uptime Kuma push, ...).

``[monitor] start_url`` is POSTed when a run starts; when it ends,
``success_url`` (exit 0, or 75: another run holds the lock and does the work)
or ``failure_url`` (anything else) gets the run's outcome as JSON. A ping that
fails is logged (``monitor.ping.failed``) and forgotten: watching a run is
never a reason to fail it. Ping URLs usually embed a secret check id, so logs
name only the host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from skuferry import __version__ as _version
from skuferry import logs
from skuferry.config.schema import MonitorSettings
from skuferry.service.metrics import RunOutcome

if TYPE_CHECKING:
    import httpx  # imported when a ping is sent: a run without [monitor] never loads it

log = logs.get(__name__)

MAX_PROBLEMS = 20  # keep the body small (healthchecks.io keeps the first 100 kB)


def ping_start(settings: MonitorSettings, *, transport: httpx.BaseTransport | None = None) -> bool:
    """Tell the monitor a run began; True if it answered 2xx."""
    if not settings.start_url:
        return False
    return _post("start", settings.start_url, None, settings.timeout_s, transport)


def ping_finish(
    settings: MonitorSettings,
    outcome: RunOutcome,
    *,
    transport: httpx.BaseTransport | None = None,
) -> bool:
    """Report a finished run to ``success_url`` or ``failure_url``; True if it answered 2xx."""
    good = outcome.result in ("success", "locked", "not_ready")  # 75: nothing to do yet
    url = settings.success_url if good else settings.failure_url
    if not url:
        return False
    return _post(
        "success" if good else "failure", url, ping_body(outcome), settings.timeout_s, transport
    )


def ping_body(outcome: RunOutcome) -> dict[str, Any]:
    """The JSON a monitor receives: exit code, result, and the summary or the error."""
    body: dict[str, Any] = {
        "result": outcome.result,
        "exit_code": outcome.exit_code,
        "duration_s": round(outcome.duration_s, 3),
    }
    if outcome.summary is not None:
        summary = outcome.summary.as_json()
        problems = summary["problems"]
        summary["problems"] = problems[:MAX_PROBLEMS]
        if len(problems) > MAX_PROBLEMS:
            summary["problems_omitted"] = len(problems) - MAX_PROBLEMS
        body["summary"] = summary
    if outcome.error is not None:
        body["error"] = outcome.error
    return body


def _post(
    which: str,
    url: str,
    body: dict[str, Any] | None,
    timeout_s: float,
    transport: httpx.BaseTransport | None,
) -> bool:
    import httpx

    host = urlsplit(url).hostname or "?"
    try:
        with httpx.Client(
            timeout=timeout_s,
            transport=transport,
            headers={"User-Agent": f"skuferry/{_version}"},
        ) as client:
            response = client.post(url, json=body) if body is not None else client.post(url)
    except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
        log.warning(
            "monitor.ping.failed", ping=which, host=host, error=type(exc).__name__, detail=str(exc)
        )
        return False
    if not response.is_success:
        log.warning("monitor.ping.failed", ping=which, host=host, status=response.status_code)
        return False
    log.debug("monitor.ping.sent", ping=which, host=host)
    return True
