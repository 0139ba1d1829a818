"""TLS verification for every outgoing HTTPS connection: on, with an optional private CA.

There is no switch to turn verification off: a CMS or PIM behind a private CA
gets ``ca_bundle`` (a PEM file of its CA certificates) instead.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from skuferry.errors import ConfigError


def verify_for(ca_bundle: Path | None, *, key: str) -> ssl.SSLContext | bool:
    """What httpx's ``verify=`` gets: a context trusting ``ca_bundle``, else ``True``.

    ``True`` lets httpx honour ``SSL_CERT_FILE``/``SSL_CERT_DIR`` when set, else use certifi.
    ``key`` names the setting (``api.ca_bundle``) in the error for an unusable file.
    """
    if ca_bundle is None:
        return True
    try:
        return ssl.create_default_context(cafile=str(ca_bundle))
    except (OSError, ssl.SSLError) as exc:
        problem = f"at '{key}': cannot load CA certificates from {ca_bundle}: {exc}"
        raise ConfigError([problem]) from None
