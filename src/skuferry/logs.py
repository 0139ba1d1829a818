"""Logging: structlog everywhere, configured here and only here.

Events have dotted names (``sync.create.failed``) and key/value fields. On a
terminal they render for people; otherwise (journald, cron mail, CI) as one JSON
object per line on stderr, so stdout stays free for ``--json`` summaries.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

_REDACT_KEYS = frozenset({"api_key", "authorization", "token", "password", "secret"})


def _redact(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    # Defence in depth: no event should carry a secret, but if a field is named like one
    # it is masked before any renderer sees it.
    for k in list(event):
        if k.lower() in _REDACT_KEYS:
            event[k] = "***"
    return event


def configure(
    *, level: str = "info", json: bool | None = None, stream: TextIO | None = None
) -> None:
    """Configure structlog; ``json=None`` picks JSON unless the stream is a terminal."""
    out = stream if stream is not None else sys.stderr
    use_json = (not out.isatty()) if json is None else json
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )


class _Named:
    """A logger that binds ``logger=name`` at each call, not at import.

    ``structlog.get_logger().bind(...)`` assembles a concrete logger at once, so a
    module-level ``log = get(__name__)`` would keep the config of import time and
    ignore a later ``configure()`` (level, JSON, stream).
    """

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(structlog.get_logger().bind(logger=self._name), attr)


def get(name: str | None = None) -> Any:
    """A logger that follows the current configuration; ``name`` becomes the ``logger`` field."""
    return _Named(name) if name else structlog.get_logger()
