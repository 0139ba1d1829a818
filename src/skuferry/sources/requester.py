"""One page's request for the API sources (``http``, ``graphql``): built, sent, read, decoded.

A paginator says what to ask for (``Ask``); the source says how an ask becomes an
HTTP request (``build``: a GET's query, a POST's body members, a GraphQL payload).
The requester does the rest, the same way for every source: it sends the request
through the source's connection (pinned, paced, retried), refuses a final 4xx with
the API's own message, reads the body within ``max_page_bytes`` (a declared
``Content-Length`` past it is refused before a byte is read), decodes it as JSON,
and hands it to the caller's ``accept`` (which makes the page, or asks for a retry:
a GraphQL throttle). Every error names the source and the page, and where the source
shows URLs (``show``), the page's URL with its secrets masked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from skuferry import canonical
from skuferry.errors import SourceError
from skuferry.net.retry import Failed
from skuferry.sources.api import Answer, ApiConnection
from skuferry.sources.paginators import Ask

T = TypeVar("T")


class Requester:
    """The pages of one API source: ``fetch(client, ask, number, accept)``."""

    def __init__(
        self,
        api: ApiConnection,
        *,
        name: str,
        build: Callable[[httpx.Client, Ask], httpx.Request],
        log: Any,
        event: str,
        max_bytes: int,
        advice: str,
        show: Callable[[httpx.URL], str] | None = None,
    ) -> None:
        """``name`` prefixes every error (``http https://pim/...``); ``log`` and ``event``
        (``source.http``) are the caller's logger and event prefix (``.retry``,
        ``.throttled``); ``advice`` ends the too-large error (what to set instead)."""
        self._api, self._name, self._build = api, name, build
        self._log, self._event, self._show = log, event, show
        self._max_bytes, self._advice = max_bytes, advice

    def where(self, number: int) -> str:
        return f"{self._name}: page {number}"

    def at(self, number: int, url: httpx.URL) -> str:
        """The page as errors name it: with its URL where the source shows URLs."""
        return (
            self.where(number)
            if self._show is None
            else f"{self.where(number)} ({self._show(url)})"
        )

    def fetch(
        self,
        client: httpx.Client,
        ask: Ask,
        number: int,
        accept: Callable[[Answer, Any], T | Failed],
    ) -> T:
        """``accept``'s verdict on the decoded body of the first answer not retried."""

        def answered(answer: Answer) -> T | Failed:
            if answer.status >= 400:
                raise answer.refused(self.at(number, answer.response.url))
            return accept(answer, self._decode(answer, number))

        def give_up(failed: Failed, attempts: int) -> SourceError:
            shown = self.where(number)
            if self._show is not None:  # the request that failed, as it would be sent
                shown = self.at(number, self._build(client, ask).url)
            return SourceError(f"{shown} failed after {attempts} attempt(s): {failed.problem}")

        def on_retry(failed: Failed, attempt: int, delay: float) -> None:
            if not failed.counted:  # the server said when to come back: not a failure
                self._log.info(f"{self._event}.throttled", page=number, delay_s=round(delay, 3))
                return
            self._log.warning(
                f"{self._event}.retry",
                page=number,
                problem=failed.problem,
                attempt=attempt,
                delay_s=round(delay, 3),
            )

        return self._api.send(
            client,
            lambda: self._build(client, ask),
            where=self.where(number),
            read=lambda response: self._read(response, number),
            accept=answered,
            give_up=give_up,
            on_retry=on_retry,
        )

    def _read(self, response: httpx.Response, number: int) -> bytes:
        """The body, refused once past ``max_bytes``: a huge page never fills memory."""
        limit = self._max_bytes
        declared = response.headers.get("Content-Length", "")
        size = int(declared) if declared.isdigit() else 0
        chunks: list[bytes] = []
        if size <= limit:
            size = 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > limit:
                    break
                chunks.append(chunk)
        if size > limit:
            raise SourceError(
                f"{self.at(number, response.url)} is larger than max_page_bytes "
                f"({limit} bytes); ask for {self._advice}"
            )
        return b"".join(chunks)

    def _decode(self, answer: Answer, number: int) -> Any:
        try:
            return canonical.loads(answer.content)
        except ValueError:
            head = answer.content[:60].decode("utf-8", "replace")
            content_type = answer.response.headers.get("content-type", "none")
            raise SourceError(
                f"{self.at(number, answer.response.url)} is not JSON "
                f"(content-type {content_type}, body starts {head!r})"
            ) from None
