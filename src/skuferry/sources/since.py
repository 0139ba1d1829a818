"""The ``since`` value an incremental pull sends: formatted, and templated into a parameter.

``since_format``: ``iso8601`` (``2026-11-22T09:00:00+00:00``, UTC), ``epoch``
(unix seconds) or a strftime pattern applied to UTC (Akeneo takes
``%Y-%m-%d %H:%M:%S``). ``since_template`` wraps the value for APIs that take
a search expression, e.g. Akeneo's
``search={"updated":[{"operator":">","value":"{since}"}]}``.
"""

from __future__ import annotations

from datetime import UTC, datetime


def format_since(when: datetime, fmt: str) -> str:
    utc = when.astimezone(UTC)
    if fmt == "epoch":
        return str(int(utc.timestamp()))
    if fmt == "iso8601":
        return utc.isoformat(timespec="seconds")
    return utc.strftime(fmt)


def since_params(
    param: str | None, fmt: str, template: str | None, when: datetime
) -> dict[str, str]:
    """The query parameter(s) that ask the API for records changed after ``when``."""
    if not param:
        return {}
    value = format_since(when, fmt)
    # str.replace, not str.format: a JSON template is full of braces
    return {param: template.replace("{since}", value) if template else value}
