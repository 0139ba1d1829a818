"""The ``since`` value an incremental pull sends: formatted, and templated into a parameter.

``since_format``: ``iso8601`` (``2026-11-22T09:00:00+00:00``, UTC), ``epoch``
(unix seconds) or a strftime pattern applied to UTC (Akeneo takes
``%Y-%m-%d %H:%M:%S``). ``since_template`` wraps the value for APIs that take
a search expression, e.g. Akeneo's
``search={"updated":[{"operator":">","value":"{since}"}]}``. A template that
starts with ``?`` is a query string of several parameters sent together
(Magento's ``searchCriteria[filter_groups][0][filters][0][field|value|condition_type]``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl


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
    if template is not None and template.startswith("?"):
        # several parameters (Magento's field, value and condition of one filter)
        return {k: v.replace("{since}", value) for k, v in parse_qsl(template[1:])}
    # str.replace, not str.format: a JSON template is full of braces
    return {param: template.replace("{since}", value) if template else value}


def since_value(fmt: str, template: str | None, when: datetime) -> Any:
    """The since filter as a JSON value for a request body (``since_body_path``).

    Without a template: the formatted time (a string). With one: the template with
    ``{since}`` replaced, read as JSON when it is JSON (Odoo's domain term
    ``["write_date", ">", "{since}"]``), else kept as text.
    """
    value = format_since(when, fmt)
    if template is None:
        return value
    as_json = template.replace("{since}", json.dumps(value)[1:-1])  # escaped inside a string
    try:
        return json.loads(as_json)
    except ValueError:
        return template.replace("{since}", value)


def put_since(body: dict[str, Any], path: str, value: Any) -> None:
    """Set the dotted member ``path`` of ``body`` to ``value``; a list there gets it appended.

    Odoo's ``domain`` is a list of terms joined by AND, so the filter is one more term.
    """
    *parents, last = path.split(".")
    node = body
    for name in parents:
        child = node.get(name)
        if not isinstance(child, dict):
            child = node[name] = {}
        node = child
    current = node.get(last)
    if isinstance(current, list):
        node[last] = [*current, value]
    else:
        node[last] = value
