"""Where a source's credentials may go: the origin rule, shared by every fetching source.

A source sends its credentials (headers, tokens, SFTP keys) only to the
origin (scheme, host, port) of its configured URL. A next link, cursor URL or
redirect that leaves that origin is refused with an error naming both origins,
unless ``[source] allowed_origins`` lists the new one. A move from ``https`` to
``http`` is refused always: an allow-list entry must not silently downgrade.
Plain ``http://`` to a host that is not a loopback literal is refused unless
``allow_insecure_http = true``: the credentials would cross the network in
clear text.

Pure functions, no I/O: the fetching code calls them before every request.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import NamedTuple
from urllib.parse import urlsplit

from skuferry.errors import SourceError

DEFAULT_PORTS = {"http": 80, "https": 443, "sftp": 22, "ssh": 22}


class Origin(NamedTuple):
    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def origin(url: str) -> Origin:
    """``(scheme, host, port)`` of a URL, lower-cased, with the scheme's default port.

    Raise ``ValueError`` for a URL with no scheme or host, or an unknown scheme
    without an explicit port.
    """
    parts = urlsplit(str(url).strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").rstrip(".").lower()
    if not scheme or not host:
        raise ValueError(f"{url!r} is not an absolute URL (scheme://host...)")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{url!r} has an invalid port") from exc
    if port is None:
        if scheme not in DEFAULT_PORTS:
            raise ValueError(f"{url!r}: unknown scheme {scheme!r} and no port")
        port = DEFAULT_PORTS[scheme]
    return Origin(scheme, host, port)


def parse_allowed(entries: Iterable[str]) -> frozenset[Origin]:
    """The origins of ``allowed_origins`` entries (``https://host[:port]``).

    Raise ``ValueError`` naming an entry that is not an absolute URL.
    """
    return frozenset(origin(entry) for entry in entries)


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (127.0.0.0/8, ::1).

    Only literals count: a name that merely resolves to 127.0.0.1 today might
    not tomorrow, so it is treated as remote.
    """
    name = host.strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def insecure_http_problem(url: str, *, allow_insecure_http: bool) -> str | None:
    """Why a configured URL may not be used in clear text, or None when it may."""
    try:
        o = origin(url)
    except ValueError as exc:
        return str(exc)
    if o.scheme != "http" or allow_insecure_http or is_loopback_host(o.host):
        return None
    return (
        f"http:// to {o.host} sends credentials and catalog data in clear text; "
        "use https://, or set allow_insecure_http = true in this table if the network is trusted"
    )


def check_same_origin(base: str, url: str, allowed: Iterable[Origin | str] = ()) -> None:
    """Refuse (``SourceError``) a request to ``url`` that leaves the origin of ``base``.

    ``allowed`` holds extra origins (``Origin`` or URL text) that may be used;
    an https→http downgrade is refused even when listed.
    """
    home = origin(base)
    try:
        there = origin(url)
    except ValueError as exc:
        raise SourceError(f"refusing to follow {url!r} from {home}: {exc}") from None
    if there == home:
        return
    if home.scheme == "https" and there.scheme == "http":
        raise SourceError(
            f"refusing to follow a move from {home} to {there}: "
            "https to http would send credentials in clear text"
        )
    extra = {a if isinstance(a, Origin) else origin(a) for a in allowed}
    if there in extra:
        return
    raise SourceError(
        f"refusing to send credentials to {there}: it is not the configured origin {home} "
        f'(add "{there}" to [source] allowed_origins if it is trusted)'
    )
