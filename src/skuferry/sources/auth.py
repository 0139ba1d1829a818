"""How the API sources (``http``, ``graphql``) prove who they are: ``[source] auth``.

- ``bearer``: ``Authorization: Bearer <token>``; ``header``: ``<header_name>: <token>``
  (``X-Shopify-Access-Token``, ``X-Api-Key``); ``basic``: username and password.
- ``oauth2``: an access token from ``token_url`` (``grant = "client_credentials"`` or
  ``"password"``), the client in an HTTP Basic header (``client_auth = "basic"``)
  or in the body (``"body"``), the body a form (``token_request = "form"``) or JSON
  (``"json"``, Akeneo). The token lives in memory only. It is renewed shortly
  before ``expires_in`` runs out, and once when the API answers 401 (with the
  refresh token when one was given, else with a new grant); a second 401 fails
  the pull (``SourceError``, exit 3) naming what the token endpoint answered.

Where each credential goes: the client secret and the password only to
``token_url`` (its own client: no ``[source] headers``, no redirects followed),
the access token and static credentials only to ``url``'s origin and
``allowed_origins`` (the API client's requests pass its origin gate). A
token endpoint on another host is fine: it is named explicitly.

Written here rather than with Authlib or httpx-auth: Authlib 1.9's httpx
integration warns on import that it is deprecated and posts token requests as
``data=`` only (no JSON body for Akeneo); httpx-auth also posts forms only and
keeps tokens in a process-wide cache; neither renews once on a 401.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from skuferry import canonical, logs, tls
from skuferry.config.schema import ApiSourceSettings
from skuferry.config.secrets import read_secret
from skuferry.errors import ConfigError, SourceError
from skuferry.net.retry import Failed, retry_after, retrying, transport_problem
from skuferry.net.transport import gated_client
from skuferry.sources.wiring import LIVE, Wiring

log = logs.get(__name__)

_LEEWAY_CAP_S = 60.0  # renew this long before expiry at most (10 % of a short lifetime)
_TOKEN_ATTEMPTS = 3  # a token request that meets a connect error, 429 or 5xx is tried again


@dataclass(frozen=True, slots=True)
class _Token:
    access: str
    refresh: str | None
    renew_at: float | None  # clock time to renew at; None: until the API refuses it
    summary: str  # the token endpoint's answer without any secret, for messages


def api_credentials(
    settings: ApiSourceSettings, wiring: Wiring = LIVE
) -> tuple[dict[str, str], httpx.Auth | None]:
    """The API client's default headers and ``httpx.Auth`` for ``[source] auth``."""
    s = settings
    env = wiring.env
    headers = dict(s.headers)
    if s.auth in ("bearer", "header"):
        token = read_secret(
            inline=s.token, file=s.token_file, env_name=s.token_env, key="token", env=env
        )
        if token is None:  # the settings model requires one; guards a model built by hand
            raise ConfigError([f"at 'source.token': auth = {s.auth!r} needs a token"])
        if s.auth == "bearer":
            headers["Authorization"] = f"Bearer {token.get_secret_value()}"
        else:
            headers[s.header_name or "Authorization"] = token.get_secret_value()
        return headers, None
    if s.auth == "basic":
        password = _password(s, env)
        if password is None or s.username is None:
            raise ConfigError(
                ["at 'source.password': auth = \"basic\" needs a username and a password"]
            )
        return headers, httpx.BasicAuth(s.username, password)
    if s.auth == "oauth2":
        return headers, OAuth2(s, wiring)
    return headers, None


@contextlib.contextmanager
def token_session(auth: httpx.Auth | None) -> Iterator[None]:
    """Around one pull: the token endpoint's connection is closed after it, however it ends."""
    try:
        yield
    finally:
        if isinstance(auth, OAuth2):
            auth.close()


def _password(s: ApiSourceSettings, env: Mapping[str, str] | None) -> str | None:
    secret = read_secret(
        inline=s.password, file=s.password_file, env_name=s.password_env, key="password", env=env
    )
    return None if secret is None else secret.get_secret_value()


class OAuth2(httpx.Auth):
    """Bearer tokens from an OAuth2 token endpoint, fetched and renewed as needed."""

    def __init__(self, settings: ApiSourceSettings, wiring: Wiring = LIVE) -> None:
        s = settings
        env = wiring.env
        if not s.token_url or not s.client_id:  # the settings model requires both
            raise ConfigError(["at 'source.token_url': auth = \"oauth2\" needs token_url"])
        self._settings = s
        self._token_url = s.token_url
        secret = read_secret(
            inline=s.client_secret,
            file=s.client_secret_file,
            env_name=s.client_secret_env,
            key="client_secret",
            env=env,
        )
        self._client_secret = None if secret is None else secret.get_secret_value()
        self._password = _password(s, env) if s.grant == "password" else None
        if s.grant == "password" and (self._password is None or not s.username):
            raise ConfigError(["at 'source.password': grant = \"password\" needs a password"])
        self._secrets = [v for v in (self._client_secret, self._password) if v]
        logs.add_secrets(self._secrets)
        self._clock = wiring.clock
        self._sleep = wiring.sleep
        self._stop = wiring.stop
        self._lock = threading.Lock()
        self._token: _Token | None = None
        self.requests = 0  # token requests made (for figures and tests)
        self._transport = wiring.transport
        self._verify = True if wiring.verify is None else wiring.verify
        self._open: httpx.Client | None = None

    @property
    def _client(self) -> httpx.Client:
        # its own client: the [source] headers and the API's auth never go to token_url,
        # and a redirect is refused rather than followed with the secret; pinned to
        # token_url's origin like every client, not paced (a token is not a page)
        if self._open is None:
            self._open = gated_client(
                home=self._token_url,
                transport=self._transport,
                verify=self._verify,
                timeout=self._settings.timeout_s,
            )
        return self._open

    def close(self) -> None:
        """Close the token endpoint's connection (the token is kept for the next pull)."""
        if self._open is not None:
            self._open.close()
            self._open = None

    # -- httpx.Auth ------------------------------------------------------------------

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        refused = self.access_token()
        request.headers["Authorization"] = f"Bearer {refused}"
        response = yield request
        if response.status_code != 401:
            return
        token = self.renew(refused)
        log.info("source.oauth2.renewed", reason="401", url=_where(self._token_url))
        request.headers["Authorization"] = f"Bearer {token.access}"
        response = yield request
        if response.status_code == 401:
            raise SourceError(
                f"{_where(str(request.url))} answered HTTP 401 again with a token just "
                f"renewed at {_where(self._token_url)} (which answered: {token.summary}); "
                "check the client's rights (scope, API role) at the token endpoint"
            )

    # -- tokens ------------------------------------------------------------------------

    def access_token(self) -> str:
        """A token that is not about to expire (fetched or renewed now if needed)."""
        with self._lock:
            token = self._token
            if token is None:
                token = self._fetch(refresh=None)
            elif token.renew_at is not None and self._clock() >= token.renew_at:
                token = self._renewed(token)
                log.info("source.oauth2.renewed", reason="expiry", url=_where(self._token_url))
            self._token = token
            return token.access

    def renew(self, refused: str) -> _Token:
        """A new token after the API refused ``refused`` (unless another was got since)."""
        with self._lock:
            token = self._token
            if token is None or token.access == refused:
                token = self._renewed(token) if token is not None else self._fetch(refresh=None)
            self._token = token
            return token

    def _renewed(self, old: _Token) -> _Token:
        if old.refresh:
            try:
                return self._fetch(refresh=old.refresh)
            except SourceError as exc:  # an expired or revoked refresh token: a new grant
                log.info("source.oauth2.refresh_refused", problem=str(exc))
        return self._fetch(refresh=None)

    def _fetch(self, *, refresh: str | None) -> _Token:
        s = self._settings
        grant = "refresh_token" if refresh else s.grant
        data: dict[str, str] = {"grant_type": grant}
        if refresh:
            data["refresh_token"] = refresh
        elif s.grant == "password":
            data["username"] = s.username or ""
            data["password"] = self._password or ""
        if s.scope and not refresh:
            data["scope"] = s.scope
        headers = {"Accept": "application/json"}
        auth: httpx.Auth | None = None
        if s.client_auth == "basic" and self._client_secret is not None:
            auth = httpx.BasicAuth(s.client_id or "", self._client_secret)
        else:
            data["client_id"] = s.client_id or ""
            if self._client_secret is not None:
                data["client_secret"] = self._client_secret
        as_json = s.token_request == "json"  # noqa: S105 - a body format, not a secret
        request = self._client.build_request(
            "POST",
            self._token_url,
            headers=headers,
            json=data if as_json else None,
            data=None if as_json else data,
        )
        if auth is not None:
            request = next(auth.auth_flow(request))
        response = self._send(request, grant)
        return self._parse(response, grant)

    def _send(self, request: httpx.Request, grant: str) -> httpx.Response:
        """The token endpoint's answer; connect errors, 429 and 5xx tried again (the retry loop)."""

        def attempt() -> httpx.Response | Failed:
            self.requests += 1
            try:
                response = self._client.send(request)
            except httpx.TransportError as exc:
                untrusted = tls.untrusted(exc, key="source.ca_bundle")
                if untrusted is not None:  # the same certificate next time: no retry
                    raise SourceError(
                        f"the token endpoint {_where(self._token_url)}: {untrusted}"
                    ) from None
                return Failed(transport_problem(exc))
            if response.status_code != 429 and response.status_code < 500:
                return response
            return Failed(f"HTTP {response.status_code}", wait=retry_after(response.headers))

        def give_up(failed: Failed, attempts: int) -> SourceError:
            return SourceError(
                f"the token endpoint {_where(self._token_url)} could not be reached for the "
                f"{grant} grant after {attempts} attempts: {self._clean(failed.problem)}"
            )

        return retrying(
            attempt,
            retries=_TOKEN_ATTEMPTS - 1,
            backoff=lambda retry: min(2.0**retry, 10.0),
            give_up=give_up,
            stop=self._stop,
            sleep=self._sleep,
            what=f"the token request to {_where(self._token_url)}",
        )

    def _parse(self, response: httpx.Response, grant: str) -> _Token:
        where = _where(self._token_url)
        if response.has_redirect_location:
            raise SourceError(
                f"the token endpoint {where} answered HTTP {response.status_code} (a redirect); "
                "the credentials are not sent on: give its final address as token_url"
            )
        try:
            body = canonical.loads(response.content)
        except ValueError:
            body = None
        if response.status_code >= 400 or not isinstance(body, dict):
            raise SourceError(
                f"the token endpoint {where} refused the {grant} grant: "
                f"{self._answer(response, body)}"
            )
        access = body.get("access_token")
        if not isinstance(access, str) or not access:
            raise SourceError(
                f"the token endpoint {where} answered the {grant} grant without an "
                f"access_token (members: {', '.join(sorted(map(str, body))) or 'none'})"
            )
        # Not added to the log redactor (logs.add_secrets): a daemon renews every hour for
        # years, and the redactor's pattern would grow with every token. No message here
        # is built from a token or a request's headers.
        refresh = body.get("refresh_token")
        if not isinstance(refresh, str) or not refresh:
            refresh = None
        lifetime = _seconds(body.get("expires_in"))
        renew_at = None
        if lifetime is not None:
            renew_at = self._clock() + lifetime - min(_LEEWAY_CAP_S, lifetime * 0.1)
        parts = [f"HTTP {response.status_code}", f"token_type {body.get('token_type', '?')}"]
        if lifetime is not None:
            parts.append(f"expires_in {lifetime:g} s")
        if isinstance(body.get("scope"), str):
            parts.append(f"scope {self._clean(body['scope'])}")
        log.info("source.oauth2.token", url=where, grant=grant, expires_in=lifetime)
        return _Token(access, refresh, renew_at, ", ".join(parts))

    def _answer(self, response: httpx.Response, body: Any) -> str:
        """What the token endpoint said, every secret masked."""
        said = f"HTTP {response.status_code}"
        if isinstance(body, dict) and ("error" in body or "error_description" in body):
            error = body.get("error")
            text = error if isinstance(error, str) else canonical.dumps(error)
            if body.get("error_description"):
                text += f" ({body['error_description']})"
            said += f": {text}"
        elif isinstance(body, dict) and isinstance(body.get("message"), str):
            said += f": {body['message']}"  # Akeneo: {"code": 422, "message": "..."}
        elif response.content:
            said += f": {response.content[:200].decode('utf-8', 'replace')!r}"
        return self._clean(said)

    def _clean(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return logs.redact_text(text)


def said(content: bytes) -> str:
    """``": <message>"`` from an API's error answer, or "" when it has none.

    The shapes of the systems skuferry reads: ``{"message"}`` (Akeneo, Magento,
    WooCommerce, Odoo), ``{"error": {"message"}}`` (OData), ``{"errors": "..." | [{"message"}]}``
    (GraphQL, Shopify's 401). Cut at 300 characters, registered secrets masked.
    """
    try:
        body = canonical.loads(content)
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    found = body.get("message")
    error = body.get("error")
    if found is None and isinstance(error, dict):
        found = error.get("message")
    errors = body.get("errors")
    if found is None and errors:
        found = errors[0] if isinstance(errors, list) else errors
        if isinstance(found, dict):
            found = found.get("message")
    if not isinstance(found, str) or not found.strip():
        return ""
    return f": {logs.redact_text(found.strip()[:300])}"


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if seconds > 0 else None


def _where(url: str) -> str:
    """The URL without its query (token URLs carry none; an API URL's query may)."""
    return str(httpx.URL(url).copy_with(query=None))
