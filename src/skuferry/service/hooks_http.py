"""Pushes: ``POST /hooks/sync`` and ``POST /hooks/run`` on the daemon's ``listen`` address.

(the monitoring hooks are around each run; this is the
inbound kind.)

``/hooks/sync`` takes ``{"keys": ["SKU-1", ...]}``, or Akeneo's Events API
payload (``{"events": [{"data": {"resource": {"identifier": "SKU-1"}}}]}``),
and queues those keys: coalesced in the daemon's inbox, synced by a targeted
run within a second, or by the urgent lane of the run going.
``/hooks/run`` asks for a full run.

Every request is authenticated before its body is even parsed, by an
HMAC-SHA256 of the body with the shared secret (``[daemon] hook_secret_file``
or ``hook_secret_env``):

- ``X-Skuferry-Signature: sha256=<hex of HMAC(secret, body)>``, or
- Akeneo's ``X-Akeneo-Request-Signature: <hex of HMAC(secret, timestamp + "." + body)>``
  with ``X-Akeneo-Request-Timestamp`` (unix seconds) no more than ``MAX_AGE_S``
  from now, so a captured request cannot be replayed later.

Signatures are compared in constant time. A missing, wrong or stale signature
gets 401 and triggers nothing. The body is never logged (it names products and
may come from anyone who can reach the port); the log says how many keys came.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from skuferry import canonical, logs
from skuferry.config.schema import DaemonSettings
from skuferry.config.secrets import read_daemon_secret
from skuferry.errors import ConfigError

log = logs.get(__name__)

SIGNATURE_HEADER = "X-Skuferry-Signature"
AKENEO_SIGNATURE = "X-Akeneo-Request-Signature"
AKENEO_TIMESTAMP = "X-Akeneo-Request-Timestamp"
MAX_AGE_S = 300.0  # an Akeneo timestamp further than this from now is stale
MAX_BODY_BYTES = 1024 * 1024
MAX_KEYS = 10_000  # per request
PATHS = ("/hooks/sync", "/hooks/run")


def load_secret(settings: DaemonSettings, env: Mapping[str, str] | None = None) -> bytes | None:
    """The shared secret, or None when no hook secret is configured (hooks off)."""
    if not settings.hooks:
        return None
    secret = read_daemon_secret(settings, "hook_secret", env)
    if secret is None or not secret.get_secret_value():
        raise ConfigError(["at 'daemon.hook_secret_file': the hook secret is empty"])
    return secret.get_secret_value().encode()


def sign(secret: bytes, body: bytes) -> str:
    """The ``X-Skuferry-Signature`` value for ``body``: ``sha256=<hex>``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def sign_akeneo(secret: bytes, body: bytes, timestamp: str) -> str:
    """Akeneo's ``X-Akeneo-Request-Signature`` for ``body`` sent at ``timestamp``."""
    return hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def refusal(headers: Mapping[str, str], body: bytes, secret: bytes, *, now: float) -> str | None:
    """Why the request is not authentic (for the log, never the body), or None when it is."""
    given = headers.get(SIGNATURE_HEADER.lower())
    if given is not None:
        if hmac.compare_digest(given.strip().encode(), sign(secret, body).encode()):
            return None
        return "bad signature"
    akeneo = headers.get(AKENEO_SIGNATURE.lower())
    if akeneo is None:
        return "no signature header"
    stamp = (headers.get(AKENEO_TIMESTAMP.lower()) or "").strip()
    try:
        sent_at = float(stamp)
    except ValueError:
        return "no valid timestamp"
    if abs(now - sent_at) > MAX_AGE_S:
        return "stale timestamp"
    expected = sign_akeneo(secret, body, stamp)
    if hmac.compare_digest(akeneo.strip().lower().encode(), expected.encode()):
        return None
    return "bad signature"


class BadHookError(ValueError):
    """A signed body that is not a hook payload (400)."""


def keys_from(body: bytes) -> list[str]:
    """The keys of ``{"keys": [...]}`` or of Akeneo's events, each once, in order."""
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        raise BadHookError("the body is not JSON") from None
    keys: list[Any]
    if isinstance(data, dict) and "keys" in data:
        keys = data["keys"] if isinstance(data["keys"], list) else [None]
    elif isinstance(data, dict) and isinstance(data.get("events"), list):
        keys = [_identifier(event) for event in data["events"]]
        keys = [k for k in keys if k is not None]  # events about other resources
    else:
        raise BadHookError('expected {"keys": [...]} or an Akeneo events payload')
    if not all(isinstance(k, str) and k for k in keys):
        raise BadHookError("every key must be a non-empty string")
    if len(keys) > MAX_KEYS:
        raise BadHookError(f"at most {MAX_KEYS} keys per request")
    return list(dict.fromkeys(k for k in map(canonical.key, keys) if k))  # as keys are stored


def _identifier(event: Any) -> str | None:
    if not isinstance(event, dict):
        return None
    resource = (
        (event.get("data") or {}).get("resource") if isinstance(event.get("data"), dict) else None
    )
    if not isinstance(resource, dict):
        return None
    value = resource.get("identifier")
    return value if isinstance(value, str) and value else None


@dataclass
class Desk:
    """Answers the hook routes; the daemon gives it what to do with a valid request."""

    secret: bytes
    on_keys: Callable[[list[str]], int]  # queue keys; returns how many are waiting
    on_run: Callable[[], None]  # ask for a full run
    clock: Callable[[], float] = time.time

    def handle(
        self, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) for a POST to ``path``; ``headers`` with lowercase names."""
        problem = refusal(headers, body, self.secret, now=self.clock())
        if problem is not None:
            log.warning("daemon.hook.refused", path=path, why=problem, size=len(body))
            return 401, {"error": "unauthorized: sign the body (X-Skuferry-Signature)"}
        if path == "/hooks/run":
            self.on_run()
            log.info("daemon.hook.run")
            return 202, {"queued": "run"}
        try:
            keys = keys_from(body)
        except BadHookError as exc:
            log.warning("daemon.hook.bad", path=path, why=str(exc))
            return 400, {"error": str(exc)}
        waiting = self.on_keys(keys) if keys else 0
        log.info("daemon.hook.keys", keys=len(keys), waiting=waiting)
        return 202, {"queued": len(keys), "waiting": waiting}
