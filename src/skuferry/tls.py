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


def untrusted(exc: BaseException, *, key: str) -> str | None:
    """The message for a server certificate that the client does not trust, else None.

    Such a failure is final: trying again meets the same certificate, so the callers
    fail at once with this message instead of retrying into a bare
    ``CERTIFICATE_VERIFY_FAILED``. ``key`` names the setting that fixes it
    (``source.ca_bundle``).
    """
    table, name = key.split(".", 1)
    fix = f"if a private CA signed it, set [{table}] {name} to a PEM file of that CA"
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ssl.SSLCertVerificationError):
            why = ": ".join(x for x in (cause.reason, cause.verify_message) if x)
            return f"the server's TLS certificate is not trusted ({why}); {fix}"
        cause = cause.__cause__ or cause.__context__
    if "CERTIFICATE_VERIFY_FAILED" in str(exc):  # an error that kept only the text
        return f"the server's TLS certificate is not trusted ({exc}); {fix}"
    return None
