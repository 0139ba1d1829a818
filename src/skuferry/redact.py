"""What counts as a secret: one registry for the config, its redacted dump and the logs.

- ``API_SECRET_KEYS`` and ``SOURCE_SECRET_KEYS``: the config keys that hold a secret
  inline (a source's may also come from ``<key>_file`` or ``<key>_env``);
- ``SECRET_FIELDS``: log event fields masked whole, whatever they hold (the secret
  keys, plus names that only ever carry credentials);
- ``is_secret_header(name)``: an HTTP header whose value is a credential
  (``Authorization``, ``X-Api-Key``, ``Cookie``...), by a hint in its name.

Secret *values* are registered as they are read (``logs.add_secrets``); this module
only says which names hold one. Pure data, no I/O.
"""

from __future__ import annotations

API_SECRET_KEYS = ("api_key", "api_keys")
SOURCE_SECRET_KEYS = ("token", "password", "client_secret", "sftp_password")
SECRET_KEYS = frozenset(API_SECRET_KEYS + SOURCE_SECRET_KEYS)
SECRET_FIELDS = SECRET_KEYS | {"authorization", "secret", "cookie", "headers", "passphrase"}
SECRET_HEADER_HINTS = ("auth", "token", "key", "secret", "cookie", "password")


def is_secret_header(name: str) -> bool:
    """True for a header whose value is a credential: its name holds one of the hints."""
    lowered = name.lower()
    return any(hint in lowered for hint in SECRET_HEADER_HINTS)
