"""Which CMS a state file mirrors: its base URL and the keys it was reached with.

The spec names no workspace id, so a state file knows its CMS workspace by the base URL
and the fingerprints of the API keys it used (``config.keys.fingerprint``; never a key).
Two configs with one ``[state] path`` and other keys, or a state file copied from another
shop, would otherwise read "unchanged" against a workspace that holds none of its
products. The rule (``compare``), asked by every run and by the quick lane alike:

- the same base URL and at least one key in common: the same CMS (a key added or
  rotated one at a time is learnt);
- else the CMS may be another one: the run looks a few of the products it knows up by
  their CMS id; found, each with its key, it is the same workspace under a new URL or
  new keys, and the binding moves; not found, the run is refused (``CmsMismatch``,
  exit 2), naming the state and both CMSs, unless ``sync --moved-cms`` says the
  workspace moved.

Stored in the ``meta`` table (``cms.binding``, JSON). A state file written before this
was kept has none: its first run binds it, after the same look by id.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from skuferry.config.keys import fingerprint

META = "cms.binding"


class Metas(Protocol):
    def get_meta(self, name: str) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Binding:
    """A CMS as a state file knows it."""

    base_url: str
    keys: frozenset[str]  # fingerprints

    @classmethod
    def of(cls, base_url: str, keys: Iterable[Any]) -> Binding:
        """``keys``: the API keys (str or ``SecretStr``), fingerprinted here."""
        return cls(normal_url(base_url), frozenset(fingerprint(k) for k in keys if k))

    @classmethod
    def of_reading(cls, data: Mapping[str, Any]) -> Binding | None:
        """The CMS a raw config reading names (the quick lane, without pydantic): the
        several keys when given, else the one, as ``Settings.api_keys`` takes them."""
        api = data.get("api")
        if not isinstance(api, dict) or not isinstance(api.get("base_url"), str):
            return None
        keys = api.get("api_keys") or [api.get("api_key")]
        if not isinstance(keys, list | tuple):
            return None
        return cls.of(api["base_url"], [k for k in keys if isinstance(k, str)])

    def describe(self) -> str:
        shown = ", ".join(sorted(self.keys)) or "none"
        return f"{self.base_url} (key fingerprint(s) {shown})"

    def to_json(self) -> str:
        return json.dumps({"base_url": self.base_url, "keys": sorted(self.keys)})


def normal_url(url: str) -> str:
    """Scheme and host in lower case, no trailing slash: one CMS, one spelling."""
    parts = urlsplit(url.strip())
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path.rstrip("/"), "", ""))


def recorded(metas: Metas) -> Binding | None:
    """The CMS the state file is bound to; None: not bound yet (or unreadable)."""
    text = metas.get_meta(META)
    if not text:
        return None
    try:
        data = json.loads(text)
        return Binding(str(data["base_url"]), frozenset(map(str, data["keys"])))
    except (ValueError, KeyError, TypeError):
        return None


def compare(bound: Binding | None, current: Binding) -> str | None:
    """Why ``current`` may be another CMS than the one the state is ``bound`` to (None:
    the same one, or the state is bound to none yet)."""
    if bound is None:
        return None
    if bound.base_url != current.base_url:
        return f"another base URL ({bound.base_url} before, {current.base_url} now)"
    if not bound.keys & current.keys:
        return "none of the keys it was reached with before"
    return None
