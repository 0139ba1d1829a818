"""Logging: structlog everywhere, configured here and only here.

Events have dotted names (``sync.create.failed``) and key/value fields. On a
terminal they render for people; otherwise (journald, cron mail, CI) as one JSON
object per line on stderr, so stdout stays free for ``--json`` summaries.
"""

from __future__ import annotations

import importlib
import logging
import re
import sys
import threading
import traceback
import types
from collections.abc import Iterable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any, Protocol, TextIO, cast

from skuferry.redact import SECRET_FIELDS


class _Deferred(types.ModuleType):
    """Stands in for a module until its first attribute is read, then imports it.

    The real module is imported through the import system (its lock makes this safe
    from any thread), and only once: the stand-in is out of ``sys.modules`` by then.
    """

    def __getattr__(self, attr: str) -> Any:
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attr)


@contextmanager
def _light_structlog() -> Iterator[None]:
    """Import structlog without what a start never uses (~60 ms of a no-op run's CPU).

    structlog's own import loads, when installed:

    - rich, for pretty tracebacks and reprs (~0.1 s). JSON logs (stderr not a terminal:
      cron, systemd) never use them, so there structlog loads without rich and keeps
      its plain tracebacks; whatever needs rich later (a summary table, ``check``)
      still imports it;
    - colorama, which only Windows consoles need: elsewhere structlog writes the same
      ANSI codes without it;
    - asyncio (~25 ms), which structlog calls only from its ``async`` log methods
      (``await log.ainfo(...)``): a stand-in imports it at first use; whatever imports
      asyncio afterwards gets the real module.
    """
    if "structlog" in sys.modules:
        yield
        return
    hidden = []
    if "rich" not in sys.modules and not sys.stderr.isatty():
        hidden.append("rich")
    if "colorama" not in sys.modules and sys.platform != "win32":
        hidden.append("colorama")
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # None: "import rich" fails
    deferred = _Deferred("asyncio") if "asyncio" not in sys.modules else None
    if deferred is not None:
        sys.modules["asyncio"] = deferred
    try:
        yield
    finally:
        for name in hidden:
            if sys.modules.get(name, False) is None:
                del sys.modules[name]
        if deferred is not None and sys.modules.get("asyncio") is deferred:
            del sys.modules["asyncio"]


with _light_structlog():
    import structlog


# Shorter values would mask ordinary words; no real credential is this short.
_MIN_SECRET_CHARS = 6


class _Secrets:
    """The secret values seen so far, and one pattern matching any of them."""

    def __init__(self) -> None:
        self.values: set[str] = set()
        self.pattern: re.Pattern[str] | None = None
        self.lock = threading.Lock()


_secrets = _Secrets()


def add_secrets(values: Iterable[str]) -> None:
    """Remember secret values (API keys, tokens, passwords) to mask wherever they appear.

    Called when a secret is resolved (config load, a source reading its token file),
    so a secret that reaches a message, an exception or a traceback is shown as ``***``.
    """
    with _secrets.lock:
        new = {v for v in values if isinstance(v, str) and len(v.strip()) >= _MIN_SECRET_CHARS}
        if new <= _secrets.values:
            return
        _secrets.values.update(new)
        longest_first = sorted(_secrets.values, key=len, reverse=True)
        _secrets.pattern = re.compile("|".join(re.escape(v) for v in longest_first))


def redact_text(text: str) -> str:
    """``text`` with every registered secret replaced by ``***``."""
    pattern = _secrets.pattern
    return pattern.sub("***", text) if pattern is not None else text


def redacted_traceback(exc: BaseException) -> str:
    """The full traceback of ``exc`` (causes included) with every registered secret masked."""
    return redact_text("".join(traceback.format_exception(exc)))


def _redact(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    # Defence in depth: no event should carry a secret, but if a field is named like one
    # it is masked before any renderer sees it.
    for k in list(event):
        if k.lower() in SECRET_FIELDS:
            event[k] = "***"
    return event


def _redact_values(
    _logger: Any, _name: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    # After format_exc_info: a secret inside a message or a rendered traceback is masked too.
    if _secrets.pattern is None:
        return event
    for k, v in event.items():
        if isinstance(v, str):
            event[k] = redact_text(v)
        elif v is not None and not isinstance(v, int | float | bool):
            text = str(v)
            masked = redact_text(text)
            if masked != text:
                event[k] = masked
    return event


def cli_level(*, verbose: int, quiet: bool, on_tty: bool) -> str:
    """The level of a verb's logs: ``-vv`` debug; ``-v``, or off a terminal, info; else
    warning. ``--quiet`` (cron) keeps warnings and errors only."""
    if quiet:
        return "warning"
    return "debug" if verbose >= 2 else "info" if verbose == 1 or not on_tty else "warning"


def configure(
    *, level: str = "info", json: bool | None = None, stream: TextIO | None = None
) -> None:
    """Configure structlog; ``json=None`` picks JSON unless the stream is a terminal."""
    out = stream if stream is not None else cast(TextIO, _StderrNow())
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
            _redact_values,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )


class _StderrNow:
    """``sys.stderr`` as it is at each write, not as it was when the logs were configured.

    While the progress bar is shown, rich puts its own stderr in place, which prints a
    line above the bar; a log line written to the stderr of before would be glued to the
    bar's ``21/90 0:00:00 left``.
    """

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


class Logger(Protocol):
    """The calls skuferry logs with: a dotted event name and its fields (structlog's levels)."""

    def debug(self, event: str, *args: Any, **fields: Any) -> None: ...

    def info(self, event: str, *args: Any, **fields: Any) -> None: ...

    def warning(self, event: str, *args: Any, **fields: Any) -> None: ...

    def error(self, event: str, *args: Any, **fields: Any) -> None: ...

    def exception(self, event: str, *args: Any, **fields: Any) -> None: ...


class _Named:
    """A logger that binds ``logger=name`` at each call, not at import.

    ``structlog.get_logger().bind(...)`` assembles a concrete logger at once, so a
    module-level ``log = get(__name__)`` would keep the config of import time and
    ignore a later ``configure()`` (level, JSON, stream).
    """

    def __init__(self, name: str) -> None:
        self._name = name

    def _bound(self) -> Logger:
        logger: Logger = structlog.get_logger().bind(logger=self._name)
        return logger

    def debug(self, event: str, *args: Any, **fields: Any) -> None:
        self._bound().debug(event, *args, **fields)

    def info(self, event: str, *args: Any, **fields: Any) -> None:
        self._bound().info(event, *args, **fields)

    def warning(self, event: str, *args: Any, **fields: Any) -> None:
        self._bound().warning(event, *args, **fields)

    def error(self, event: str, *args: Any, **fields: Any) -> None:
        self._bound().error(event, *args, **fields)

    def exception(self, event: str, *args: Any, **fields: Any) -> None:
        self._bound().exception(event, *args, **fields)


# The sync's stage packages are how the code is filed, not what an operator filters by:
# the ``logger`` field leaves them out, so the names logs were filtered by stay as they were.
_STAGE_PACKAGES = ("read", "expressions", "map", "plan", "write")


def get(name: str | None = None) -> Logger:
    """A logger that follows the current configuration; ``name`` becomes the ``logger`` field
    (``skuferry.sync.write.writer`` logs as ``skuferry.sync.writer``)."""
    if name:
        parts = name.split(".")
        if parts[:2] == ["skuferry", "sync"] and len(parts) > 3 and parts[2] in _STAGE_PACKAGES:
            name = ".".join([*parts[:2], *parts[3:]])
        return _Named(name)
    logger: Logger = structlog.get_logger()
    return logger
