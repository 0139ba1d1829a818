"""Who may act on the page: one operator token, sessions made from it, CSRF tokens.

The token comes from ``[daemon] console_token_file`` or ``console_token_env`` through the
one secret resolver. A person signs in on ``/login`` and gets a session: a random id
(256 bits from ``secrets``) in an ``HttpOnly``, ``SameSite=Strict`` cookie, kept only in
this process's memory with its expiry and its own CSRF token; only the id's SHA-256 is
kept, so the table of sessions holds nothing a cookie could be made from. A script sends
``Authorization: Bearer <token>`` instead, and needs no CSRF token (no browser sends that
header on its own). Every comparison is ``hmac.compare_digest``; the token is never
logged, echoed in a page, or put in a cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from skuferry import logs
from skuferry.config.schema import DaemonSettings
from skuferry.config.secrets import read_daemon_secret
from skuferry.errors import ConfigError

SESSION_COOKIE = "skuferry_session"
LOGIN_COOKIE = "skuferry_login"  # the sign-in form's own CSRF token (double submit)
SESSION_TTL_S = 12 * 3600
MAX_SESSIONS = 256  # past it, the session closest to expiring makes room
MIN_TOKEN_CHARS = 16
BRAKE_FAILURES = 10  # wrong tokens from one address in BRAKE_WINDOW_S before it must wait
BRAKE_WINDOW_S = 60.0
BRAKE_PEERS = 4096  # addresses remembered at most (the oldest forgotten first)


def load_token(settings: DaemonSettings, env: Mapping[str, str] | None = None) -> bytes | None:
    """The console token, or None when none is configured (the page is read-only)."""
    if not settings.console_actions:
        return None
    secret = read_daemon_secret(settings, "console_token", env)
    value = secret.get_secret_value().strip() if secret is not None else ""
    where = (
        "daemon.console_token_file"
        if settings.console_token_file is not None
        else "daemon.console_token_env"
    )
    if len(value) < MIN_TOKEN_CHARS:
        raise ConfigError(
            [
                f"at '{where}': the console token must be at least {MIN_TOKEN_CHARS} "
                "characters (make one with `python3 -c 'import secrets; "
                "print(secrets.token_urlsafe(32))'`)"
            ]
        )
    logs.add_secrets([value])
    return value.encode()


@dataclass(frozen=True, slots=True)
class Session:
    csrf: str
    expires_at: float


class Gate:
    """Checks the token and keeps the sessions. Thread-safe (the server's workers share it)."""

    def __init__(
        self,
        token: bytes | None,
        *,
        ttl_s: float = SESSION_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._token = token
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}  # sha256(id) -> session

    @property
    def enabled(self) -> bool:
        """A token is configured: actions exist."""
        return self._token is not None

    @property
    def ttl_s(self) -> float:
        return self._ttl_s

    def token_matches(self, given: str) -> bool:
        if self._token is None:
            return False
        return hmac.compare_digest(given.strip().encode(), self._token)

    def bearer(self, authorization: str) -> bool:
        """``Authorization: Bearer <token>`` names the console token."""
        scheme, _, value = authorization.strip().partition(" ")
        return scheme.lower() == "bearer" and self.token_matches(value)

    def open(self) -> tuple[str, Session]:
        """A new session: its cookie value (shown once, kept hashed) and the session."""
        session_id = secrets.token_urlsafe(32)
        session = Session(secrets.token_urlsafe(32), self._clock() + self._ttl_s)
        with self._lock:
            self._expire()
            if len(self._sessions) >= MAX_SESSIONS:
                del self._sessions[min(self._sessions, key=lambda k: self._sessions[k].expires_at)]
            self._sessions[_digest(session_id)] = session
        return session_id, session

    def session(self, session_id: str | None) -> Session | None:
        """The live session of a cookie's value, or None."""
        if not session_id or self._token is None:
            return None
        with self._lock:
            found = self._sessions.get(_digest(session_id))
            if found is not None and found.expires_at <= self._clock():
                del self._sessions[_digest(session_id)]
                return None
            return found

    def close(self, session_id: str | None) -> None:
        if session_id:
            with self._lock:
                self._sessions.pop(_digest(session_id), None)

    def _expire(self) -> None:
        now = self._clock()
        for key in [k for k, s in self._sessions.items() if s.expires_at <= now]:
            del self._sessions[key]


class Brake:
    """A brake on guessing the token: failed sign-ins counted per address.

    After ``failures`` wrong tokens from one address within ``window_s``, that address
    waits (``429`` with ``Retry-After``) until the oldest of them is ``window_s`` old: ten
    guesses a minute at most, and the operator, who types the right token from there, waits
    a minute at the worst. Other addresses, and every other route (``/healthz`` included),
    are never slowed. A right token clears the address's count. Thread-safe.
    """

    def __init__(
        self,
        *,
        failures: int = BRAKE_FAILURES,
        window_s: float = BRAKE_WINDOW_S,
        peers: int = BRAKE_PEERS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._failures = failures
        self._window_s = window_s
        self._peers = peers
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[str, deque[float]] = {}  # address -> its failures' times, oldest first

    def wait_s(self, peer: str) -> int:
        """Whole seconds ``peer`` must wait before its next try (0: it may try now)."""
        with self._lock:
            times = self._recent(peer)
            if len(times) < self._failures:
                return 0
            return max(1, math.ceil(times[0] + self._window_s - self._clock()))

    def failed(self, peer: str) -> bool:
        """Count a wrong token from ``peer``; True when this one puts the brake on."""
        with self._lock:
            times = self._recent(peer)
            if peer not in self._seen and len(self._seen) >= self._peers:
                self._forget_one()
            times.append(self._clock())
            self._seen[peer] = times
            return len(times) == self._failures

    def passed(self, peer: str) -> None:
        """The right token from ``peer``: its count starts again."""
        with self._lock:
            self._seen.pop(peer, None)

    def _recent(self, peer: str) -> deque[float]:
        times = self._seen.get(peer, deque())
        cutoff = self._clock() - self._window_s
        while times and times[0] <= cutoff:
            times.popleft()
        while len(times) > self._failures:
            times.popleft()
        return times

    def _forget_one(self) -> None:
        cutoff = self._clock() - self._window_s
        for peer in [p for p, t in self._seen.items() if not t or t[-1] <= cutoff]:
            del self._seen[peer]
        if len(self._seen) >= self._peers:  # every one recent: the quietest goes
            del self._seen[min(self._seen, key=lambda p: self._seen[p][-1])]


def csrf_matches(session: Session, given: str) -> bool:
    return bool(given) and hmac.compare_digest(given.encode(), session.csrf.encode())


def nonce_matches(expected: str, given: str) -> bool:
    return bool(expected) and bool(given) and hmac.compare_digest(expected.encode(), given.encode())


def new_login_nonce() -> str:
    return secrets.token_urlsafe(24)


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()
