"""The ``since`` value an incremental pull sends: formatted, and templated into a parameter.

``since_format``: ``iso8601`` (``2026-11-22T09:00:00+00:00``), ``epoch`` (unix
seconds) or a strftime pattern (Akeneo takes ``%Y-%m-%d %H:%M:%S``). The same
format reads the change times in the records (``parse_change_time``), so that a
window can be sent back in the source's own clock: a time without a zone is
formatted as it is (the source's wall clock, never shifted to UTC); a time with
a zone keeps its offset, except for a pattern ending in a literal ``Z``, which
says UTC. ``since_template`` wraps the value for APIs that take
a search expression, e.g. Akeneo's
``search={"updated":[{"operator":">","value":"{since}"}]}``. A template that
starts with ``?`` is a query string of several parameters sent together
(Magento's ``searchCriteria[filter_groups][0][filters][0][field|value|condition_type]``).
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qsl

_EPOCH_TEXT = re.compile(r"-?\d+(\.\d+)?")
# patterns whose every reading ISO 8601 reads the same (a literal Z: UTC): read by
# datetime.fromisoformat, some forty times faster than strptime over a full pull
_ISO_PATTERNS = frozenset(
    {"iso8601", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%d"}
)


def format_since(when: datetime, fmt: str) -> str:
    """``when`` written in ``fmt``, in its own clock (see the module docstring).

    Seconds are truncated, never rounded up: a window may start early, never late.
    """
    if fmt == "epoch":
        aware = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
        return str(math.floor(aware.timestamp()))
    if fmt == "iso8601":
        return when.isoformat(timespec="seconds")
    if when.tzinfo is not None and _says_utc(fmt):
        when = when.astimezone(UTC)
    return when.strftime(fmt)


def parse_change_time(value: Any, fmt: str) -> datetime | None:
    """A record's change time read in ``fmt``; None when it cannot be read.

    ``epoch``: a number, or digits in a string (an aware UTC time). ``iso8601``:
    any ISO 8601 text (``Z``, an offset, a space for the ``T`` or none of these).
    A strftime pattern: the text in that pattern, else ISO 8601, as APIs that
    take a pattern in their filter often write ISO 8601 in their records
    (Akeneo, Business Central). The zone is as written: none stays none.
    """
    if isinstance(value, bool):
        return None
    if fmt == "epoch":
        return _epoch(value)
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if fmt not in _ISO_PATTERNS:
        try:
            when = datetime.strptime(text, fmt)  # the source's clock, as written
        except ValueError:
            pass
        else:  # a literal Z says UTC, as it does in format_since
            return when.replace(tzinfo=UTC) if when.tzinfo is None and _says_utc(fmt) else when
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _says_utc(fmt: str) -> bool:
    """A pattern ending in a literal ``Z`` (not ``%Z``) writes UTC."""
    return fmt.endswith("Z") and not fmt.endswith("%Z")


def _epoch(value: Any) -> datetime | None:
    number: float
    if isinstance(value, int | float | Decimal):
        number = float(value)
    elif isinstance(value, str) and _EPOCH_TEXT.fullmatch(value.strip()):
        number = float(value.strip())
    else:
        return None
    if not math.isfinite(number):
        return None
    try:
        return datetime.fromtimestamp(number, UTC)
    except (OverflowError, OSError, ValueError):
        return None


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
