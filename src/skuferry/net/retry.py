"""Pure retry arithmetic for the CMS client and the http source: how long to wait, and why.

Kept apart from the HTTP code (``remote/client.py``, ``sources/http.py``) so that both
use one policy and the numbers can be tested without HTTP:
``Retry-After`` parsing (delay-seconds or HTTP-date, RFC 9110 §10.2.3) and
exponential backoff with full jitter (spec §8: "doubling per attempt with
random jitter"). Nothing here sleeps; the client decides how to wait.
"""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 30.0


def backoff_delay(
    retry: int,
    *,
    rng: random.Random,
    base: float = BACKOFF_BASE_S,
    cap: float = BACKOFF_CAP_S,
) -> float:
    """Full-jitter backoff before retry number ``retry`` (0 for the first retry).

    The ceiling doubles per retry (base, 2*base, 4*base, ...) up to ``cap``;
    the wait is drawn uniformly from [0, ceiling] so that workers which failed
    together do not retry together.
    """
    if retry < 0:
        raise ValueError(f"retry must be >= 0, got {retry}")
    ceiling = min(cap, base * 2.0 ** min(retry, 62))  # min(): no float overflow on silly counts
    return min(ceiling, max(0.0, rng.uniform(0.0, ceiling)))


def _server_now(date_header: str | None) -> datetime:
    # An HTTP-date Retry-After is measured against the server's own clock when it
    # sent a Date header, so clock skew between us and the server does not matter.
    if date_header:
        try:
            parsed = parsedate_to_datetime(date_header)
        except (TypeError, ValueError, IndexError):
            parsed = None
        if parsed is not None:
            return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
    return datetime.now(UTC)


def parse_retry_after(value: str | None, *, date_header: str | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header, or None to fall back to backoff.

    Accepts delay-seconds ("30", also "1.5") and an HTTP-date. Absent, zero,
    negative, non-finite, past or unparseable values all give None: the caller
    then backs off instead of hammering the server with a zero wait.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = None
    if seconds is not None:
        return seconds if math.isfinite(seconds) and seconds > 0 else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" parses naive; HTTP-dates are always UTC
        when = when.replace(tzinfo=UTC)
    delta = (when - _server_now(date_header)).total_seconds()
    return delta if delta > 0 else None
