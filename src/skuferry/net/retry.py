"""The one retry loop of every HTTP client in skuferry, and its arithmetic.

The CMS client, the API sources (the ``http`` and ``graphql`` sources, single items
by key) and the sources' OAuth2 token requests all retry through ``retrying``:

- an attempt returns its result, raises a final error, or returns ``Failed``;
- a ``Failed`` with ``wait`` set (the server's ``Retry-After``, delay-seconds or an
  HTTP-date, RFC 9110 §10.2.3; a GraphQL cost report) is retried after exactly that
  long, else after exponential backoff with full jitter (spec §8: "doubling per
  attempt with random jitter");
- ``counted`` failures use up ``retries``; the others (a 429 RATE_LIMITED, a GraphQL
  THROTTLED: the server pacing us, not failing) do not, and the caller bounds them;
- a wait ends at once when ``stop`` is set (SIGTERM to the daemon, the engine's stop
  event), and the loop raises ``Interrupted`` instead of trying again.

No HTTP here: what an attempt is, and what its answers mean, is the caller's.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TypeVar

from skuferry.errors import Interrupted

T = TypeVar("T")

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


def retry_after(headers: Mapping[str, str]) -> float | None:
    """``parse_retry_after`` of a response's ``Retry-After``, against its ``Date``."""
    return parse_retry_after(headers.get("Retry-After"), date_header=headers.get("Date"))


def transport_problem(exc: BaseException) -> str:
    """``ConnectError: [Errno 111] ...``: a transport failure as the logs and errors name it."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@dataclass(frozen=True, slots=True)
class Failed:
    """One attempt that failed and may be tried again."""

    problem: str  # "HTTP 503", "ConnectError: ...": for the retry log and the final error
    wait: float | None = None  # what the server asked for (Retry-After...): waited exactly
    counted: bool = True  # False: does not use up a retry (the caller bounds these)
    error: Exception | None = None  # the error this failure stands for, if it has one
    # hands the wait to someone else instead of waiting here: the CMS budget's penalty
    # holds back every thread of the key's tier, and its acquire honours ``stop``
    defer: Callable[[float], None] | None = None


def pause(
    seconds: float,
    *,
    stop: threading.Event | None,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Wait ``seconds``, or until ``stop`` is set; True when a stop was requested.

    With the real ``time.sleep`` the wait is ``stop.wait``, so a SIGTERM ends it at
    once; an injected fake ``sleep`` (tests) is called and ``stop`` looked at after.
    """
    if stop is not None and sleep is time.sleep:
        return stop.wait(seconds)
    sleep(seconds)
    return stop is not None and stop.is_set()


def retrying(
    attempt: Callable[[], T | Failed],
    *,
    retries: int,
    backoff: Callable[[int], float],
    give_up: Callable[[Failed, int], Exception],
    on_retry: Callable[[Failed, int, float], None] | None = None,
    stop: threading.Event | None = None,
    sleep: Callable[[float], None] = time.sleep,
    what: str = "the request",
) -> T:
    """The result of ``attempt``, tried again on ``Failed`` until it succeeds or gives up.

    ``retries`` bounds the counted failures: the one after the last retry raises
    ``give_up(failed, retries + 1)``. Before each wait ``on_retry(failed, n, delay)``
    is told the failure, the number of this retry of its kind (counted or not, from
    1) and the seconds about to be waited; it logs, and may raise to end the loop.
    ``backoff(n)`` (n from 0, per kind) is the wait when the server named none.
    A stop request during a wait raises ``Interrupted`` naming ``what``.
    """
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    used = {True: 0, False: 0}  # retries so far, counted and not
    while True:
        outcome = attempt()
        if not isinstance(outcome, Failed):
            return outcome
        n = used[outcome.counted]
        if outcome.counted and n >= retries:
            raise give_up(outcome, retries + 1)
        used[outcome.counted] = n + 1
        delay = outcome.wait if outcome.wait is not None else backoff(n)
        if on_retry is not None:
            on_retry(outcome, n + 1, delay)
        if outcome.defer is not None:
            outcome.defer(delay)
        elif pause(delay, stop=stop, sleep=sleep):
            raise Interrupted(f"stop requested while waiting to retry {what}; not sent again")
