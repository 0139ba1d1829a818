"""Several API keys of one workspace: where they are found, and how they are named.

The spec limits requests per key and per workspace, and a workspace may hold
several keys; spreading a sync over them fills the workspace's budget. Keys are
found in this order, the first place that has any winning (environment > file >
inline, as for every secret; at each level several keys before one):

1. ``SKUFERRY_API_KEYS`` (comma- or newline-separated), then ``SKUFERRY_API_KEY``
2. ``[api] api_keys_file`` (one key per line; blank lines and ``#`` comments ignored),
   then ``[api] api_key_file``
3. ``$CREDENTIALS_DIRECTORY/api_keys`` (systemd ``LoadCredential=api_keys:PATH``),
   then ``$CREDENTIALS_DIRECTORY/api_key``
4. ``[api] api_keys`` (a list in the config file), then ``[api] api_key``

The one-key places are resolved by the raw reading's one-key chain (``_resolve_api_key``);
this module decides whether a several-keys place comes first.
A key is never printed: messages name a file and a line, logs a ``fingerprint``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the raw reading finds keys without pydantic
    from pydantic import SecretStr

ENV_API_KEYS = "SKUFERRY_API_KEYS"
ENV_API_KEY = "SKUFERRY_API_KEY"
CREDENTIAL_KEYS = "api_keys"
_SPLIT = re.compile(r"[,\r\n]")


def fingerprint(key: SecretStr | str) -> str:
    """A key's short public name: the first 8 hex digits of its SHA-256."""
    text = key if isinstance(key, str) else key.get_secret_value()
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def resolve_api_keys(api: dict[str, Any], *, env: Mapping[str, str], problems: list[str]) -> bool:
    """Put several keys into ``api['api_keys']`` (and the first into ``api_key``).

    One order for every secret: environment > file > inline, and at each level the
    several-keys form before the one-key form::

        SKUFERRY_API_KEYS > SKUFERRY_API_KEY
        > api_keys_file > api_key_file > $CREDENTIALS_DIRECTORY/api_keys > .../api_key
        > api_keys > api_key

    Returns False when a one-key place decides (or nothing is found here); ``api_keys``
    is then emptied so that the one-key chain's key is the only one. Problems are
    appended, never raised.
    """
    keys: list[str] | None = None
    folder = env.get("CREDENTIALS_DIRECTORY", "")
    creds = Path(folder) / CREDENTIAL_KEYS if folder else None
    one_key_credential = bool(folder) and (Path(folder) / "api_key").exists()
    if env.get(ENV_API_KEYS, "").strip():
        entries = _parse((part, None) for part in _SPLIT.split(env[ENV_API_KEYS]))
        keys = _checked(entries, f"{ENV_API_KEYS}: ", problems)
    elif env.get(ENV_API_KEY, "").strip():
        keys = None
    elif api.get("api_keys_file") is not None:
        path = api["api_keys_file"]
        if not isinstance(path, Path):
            return False  # its path problem is already reported
        keys = _read_file(path, "at 'api.api_keys_file': ", problems)
    elif api.get("api_key_file") is not None:
        keys = None
    elif creds is not None and creds.exists():
        where = f"at 'api.api_keys': $CREDENTIALS_DIRECTORY/{CREDENTIAL_KEYS}: "
        keys = _read_file(creds, where, problems)
    elif one_key_credential:
        keys = None
    elif api.get("api_keys"):
        inline = api["api_keys"]
        if not isinstance(inline, list | tuple) or not all(isinstance(k, str) for k in inline):
            problems.append("at 'api.api_keys': must be a list of keys (strings in quotes)")
            return True
        keys = _checked([(k.strip(), None) for k in inline], "at 'api.api_keys': ", problems)
    if keys is None:
        api["api_keys"] = ()
        return False
    api["api_keys"] = keys
    api["api_key"] = keys[0] if keys else None
    if not keys and not problems:
        problems.append("at 'api.api_keys': no API key found")
    return True


def _read_file(path: Path, where: str, problems: list[str]) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        problems.append(f"{where}cannot read '{path}': {exc.strerror or exc}")
        return []
    except UnicodeDecodeError:
        problems.append(f"{where}'{path}' is not UTF-8 text")
        return []
    lines = ((line.strip(), number) for number, line in enumerate(text.splitlines(), 1))
    before = len(problems)
    keys = _checked(_parse(lines), f"{where}'{path}' ", problems)
    if not keys and len(problems) == before:
        problems.append(f"{where}'{path}' holds no key (one per line; # starts a comment)")
    return keys


def _parse(items: Iterable[tuple[str, int | None]]) -> list[tuple[str, int | None]]:
    """Non-empty, non-comment entries with their line numbers."""
    return [(text.strip(), n) for text, n in items if text.strip() and not text.startswith("#")]


def _checked(entries: list[tuple[str, int | None]], where: str, problems: list[str]) -> list[str]:
    """The keys, each once; a key with spaces or a repeated key is a problem (by position)."""
    seen: dict[str, str] = {}
    keys: list[str] = []
    for index, (key, line) in enumerate(entries, 1):
        at = f"line {line}" if line is not None else f"entry {index}"
        if not key:
            problems.append(f"{where}{at}: is empty")
        elif any(c.isspace() for c in key):
            problems.append(f"{where}{at}: a key has no spaces (two keys on one line?)")
        elif key in seen:
            # Counted twice, one key's budget would be spent at twice its limit.
            problems.append(f"{where}{at}: the same key as {seen[key]}; list each key once")
        else:
            seen[key] = at
            keys.append(key)
    return keys
