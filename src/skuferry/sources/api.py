"""What the API sources (``http``, ``graphql``) share: the connection, and one request sent.

``ApiConnection`` holds what both build from ``[source]``: the credentials
(``[source] auth``), TLS (``ca_bundle``), the origins the credentials may go to
(``url``'s and ``allowed_origins``), the pace (``requests_per_minute``) and the
retries (``max_retries``). Its client sends every request through the origin gate,
which pins it to those origins and paces it first, redirect hops and OAuth2 re-sends
included. ``send`` is one request: sent through ``send_pinned`` (redirects followed
by hand), read, and retried by
the one retry loop on connect errors, timeouts, 408, 429 and 5xx,
waiting exactly what ``Retry-After`` says when the server said it, else backing off
(0.5 s doubled per retry, full jitter, capped at 30 s). A stop request ends a wait
(``Interrupted``). Any other answer goes to the caller's ``accept``.
"""

from __future__ import annotations

import contextlib
import random
from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import httpx

from skuferry import tls
from skuferry.config.schema import ApiSourceSettings
from skuferry.errors import ConfigError, SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.net.origins import parse_allowed
from skuferry.net.retry import Failed, backoff_delay, retry_after, retrying, transport_problem
from skuferry.net.transport import gated_client
from skuferry.sources.auth import api_credentials, said, token_session
from skuferry.sources.base import IncrementalSource
from skuferry.sources.digest import FeedDigest
from skuferry.sources.paths import optional_path
from skuferry.sources.pinned import send_pinned
from skuferry.sources.wiring import LIVE, Wiring

T = TypeVar("T")

BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0


@dataclass(frozen=True, slots=True)
class Answer:
    """A response that is not retried, read (within the caller's bound) and closed."""

    response: httpx.Response  # closed: status, headers, url and links remain
    content: bytes

    @property
    def status(self) -> int:
        return self.response.status_code

    def refused(self, where: str) -> SourceError:
        """The error for a final 4xx: the status, the API's message, a hint on 401/403."""
        hint = " (the credentials were refused)" if self.status in (401, 403) else ""
        return SourceError(f"{where} answered HTTP {self.status}{said(self.content)}{hint}")


class ApiConnection:
    """Credentials, TLS, origins, pace and retries of one API source."""

    def __init__(self, settings: ApiSourceSettings, wiring: Wiring = LIVE) -> None:
        self.settings = settings
        self.sleep = wiring.sleep
        self.stop = wiring.stop
        self._clock = wiring.clock
        self._rng = wiring.rng or random.Random()
        try:  # credentials go to url's origin and these only (the origin rule)
            self.allowed = parse_allowed(settings.allowed_origins)
        except ValueError as exc:
            raise ConfigError([f"at 'source.allowed_origins': {exc}"]) from None
        if wiring.verify is None:
            wiring = replace(
                wiring, verify=tls.verify_for(settings.ca_bundle, key="source.ca_bundle")
            )
        self.wiring = wiring
        # auth: static headers, Basic, or OAuth2 tokens from token_url
        self.headers, self.auth = api_credentials(settings, wiring)
        self._last_request_at: float | None = None

    @contextlib.contextmanager
    def client(self) -> Iterator[httpx.Client]:
        """The client of one pull; the token endpoint's connection is closed after it."""
        with (
            gated_client(  # send_pinned follows the redirects, each hop through the gate
                home=self.settings.url,
                allowed=self.allowed,
                pace=lambda _request: self.pace(),
                transport=self.wiring.transport,
                verify=self.wiring.verify,
                headers=self.headers,
                auth=self.auth,
                timeout=self.settings.timeout_s,
            ) as client,
            token_session(self.auth),
        ):
            yield client

    def pace(self) -> None:
        """Wait until ``requests_per_minute`` allows the next request (the gate asks)."""
        rpm = self.settings.requests_per_minute
        now = self._clock()
        if rpm and self._last_request_at is not None:
            wait = self._last_request_at + 60.0 / rpm - now
            if wait > 0:
                self.sleep(wait)
                now += wait
        self._last_request_at = now

    def backoff(self, retry: int) -> float:
        return backoff_delay(retry, rng=self._rng, base=BACKOFF_BASE_S, cap=BACKOFF_CAP_S)

    def send(
        self,
        client: httpx.Client,
        request: Callable[[], httpx.Request],
        *,
        where: str,
        read: Callable[[httpx.Response], bytes],
        accept: Callable[[Answer], T | Failed],
        give_up: Callable[[Failed, int], Exception],
        on_retry: Callable[[Failed, int, float], None] | None = None,
    ) -> T:
        """``accept``'s verdict on the first answer that is not retried.

        ``request`` builds a fresh request per attempt; ``where`` prefixes the origin
        errors (``http https://pim/...: page 2``); ``read`` reads the body within the
        caller's bound. ``accept`` may itself ask for a retry (a GraphQL THROTTLED).
        """

        def attempt() -> T | Failed:
            try:
                response = send_pinned(client, request(), where=where)
                try:
                    content = read(response)  # an error's body says why
                finally:
                    response.close()
            except httpx.TransportError as exc:
                untrusted = tls.untrusted(exc, key="source.ca_bundle")
                if untrusted is not None:  # the same certificate next time: no retry
                    raise SourceError(f"{where}: {untrusted}") from None
                return Failed(transport_problem(exc))
            status = response.status_code
            if status == 429 or status >= 500:
                # exactly Retry-After, read as the retry loop reads it: an HTTP-date against
                # the server's Date, a zone-less date as UTC, 0 as "back off"
                return Failed(f"HTTP {status}", wait=retry_after(response.headers))
            if status == 408:
                return Failed("HTTP 408")
            return accept(Answer(response, content))

        return retrying(
            attempt,
            retries=self.settings.max_retries,
            backoff=self.backoff,
            give_up=give_up,
            on_retry=on_retry,
            stop=self.stop,
            sleep=self.sleep,
            what=where,
        )


class ApiSource(IncrementalSource):
    """What the API sources share as sources: the connection, the change time of a
    record (``updated_path``) that an incremental pull's window follows, and the digest of
    a full pull's records (``records()`` is ``walked()`` through it; an incremental pull
    walks without it: a window is not the feed)."""

    def __init__(self, settings: ApiSourceSettings, wiring: Wiring) -> None:
        # auth, TLS, origins, pace and retries
        self._api = ApiConnection(settings, wiring)
        self._content = FeedDigest()  # the records of the last full pull, once it ended
        self.full_every = settings.full_every
        self.overlap_s = settings.since_overlap_s
        self.since_format = settings.since_format
        self._updated_path = optional_path(settings.updated_path, key="source.updated_path")

    @property
    def change_time_field(self) -> str | None:
        path = self._updated_path
        return None if path is None else f"updated_path {path.describe()}"

    def change_time(self, fields: Mapping[str, Any]) -> Any:
        return None if self._updated_path is None else self._updated_path.find(fields)

    def records(self) -> Iterator[RawRecord | BadRecord]:
        return self._content.records(self.walked())

    def window(self) -> Iterator[RawRecord | BadRecord]:
        """An incremental pull's records (its filter set by the caller): not the feed, so
        the last full pull's digest no longer holds."""
        self._content.value = None
        yield from self.walked()

    @abstractmethod
    def walked(self) -> Iterator[RawRecord | BadRecord]:
        """Every record the API gives under the pull's filter (none: the full pull)."""

    def feed_digest(self) -> str | None:
        """The records of the last full pull that went to its end (not the pages around
        them), added up whatever their order."""
        return self._content.value
