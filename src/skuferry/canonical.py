"""Canonical forms: one byte string per payload, one text per product key.

Decimals (``decimal.Decimal``) are written as JSON numbers with exactly the
digits the source gave ("19.90" stays 19.90): json.dumps would go through
float and round. Keys are sorted, separators compact, text is UTF-8.

A product key (``key``) is its text stripped and in Unicode NFC: ``CAFÉ-001``
with a precomposed ``É`` and with ``E`` plus a combining accent (NFD, as some
macOS tools and PIMs write it) are one product. Every key that enters skuferry
(a source record, a join, a walk of the CMS, the command line, a hook) goes
through it, so keys are compared and stored in one form.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from decimal import Decimal
from typing import Any

_encode_str = json.JSONEncoder(ensure_ascii=False).encode
_escape = json.encoder.encode_basestring


def dumps(value: Any) -> str:
    """Serialize ``value`` canonically (sorted keys, no spaces, decimals verbatim)."""
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"not a finite number: {value}")
        return str(value)
    if isinstance(value, dict):
        # Hot path (a digest per source row): plain scalars are written inline; the output
        # is exactly what the recursive call would give (encode_basestring is what
        # JSONEncoder(ensure_ascii=False).encode uses for str).
        parts = []
        for k, v in sorted(value.items()):
            t = type(v)
            if t is str:
                text = _escape(v)
            elif v is None:
                text = "null"
            elif t is bool:
                text = "true" if v else "false"
            elif t is int:
                text = int.__repr__(v)
            elif t is Decimal and v.is_finite():
                text = str(v)
            else:
                text = dumps(v)
            parts.append(_escape(k if type(k) is str else str(k)) + ":" + text)
        return "{" + ",".join(parts) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"not a finite number: {value}")
        return repr(value)
    return _encode_str(value)


def key(text: str) -> str:
    """A product key as skuferry compares and stores it: stripped, in Unicode NFC.

    Runs once per source row: ASCII text (most keys) is NFC already, and
    ``unicodedata.normalize`` returns text that passes its quick check unchanged.
    An undecodable byte (a lone surrogate) is kept: NFC leaves it as it is.
    """
    text = text.strip()
    if text.isascii():
        return text
    return unicodedata.normalize("NFC", text)


def keys(texts: list[str]) -> list[str | None]:
    """``key`` of each text, None for one that is empty: a batch of keys read together.

    A batch that is all ASCII (most catalogs' keys) is told in one pass in C, so the
    keys of a million unparsed lines cost what stripping them did.
    """
    if "".join(texts).isascii():
        return [text.strip() or None for text in texts]
    return [key(text) or None for text in texts]


def digest(payload: dict[str, Any]) -> str:
    """The sha256 hex digest of the canonical form: equal payloads, equal digests."""
    return hashlib.sha256(dumps(payload).encode("utf-8")).hexdigest()


def loads(text: str | bytes) -> Any:
    """Parse JSON keeping numbers with a fraction or exponent as Decimal (no rounding)."""
    return json.loads(text, parse_float=Decimal)


def same_value(sent: Any, found: Any) -> bool:
    """Whether a value read back from the remote equals what skuferry sent.

    Numbers compare by value (19.90 == 19.9, 5 == 5.0), so a server that
    normalises numbers is not mistaken for drift; bool is never a number.
    """
    if isinstance(sent, bool) or isinstance(found, bool):
        return type(sent) is type(found) and sent == found
    if isinstance(sent, int | float | Decimal) and isinstance(found, int | float | Decimal):
        return Decimal(str(sent)) == Decimal(str(found))
    if isinstance(sent, dict) and isinstance(found, dict):
        return sent.keys() == found.keys() and all(same_value(v, found[k]) for k, v in sent.items())
    if isinstance(sent, list) and isinstance(found, list):
        return len(sent) == len(found) and all(
            same_value(a, b) for a, b in zip(sent, found, strict=True)
        )
    return bool(sent == found)


def differs(payload: dict[str, Any], remote: dict[str, Any]) -> list[str]:
    """The fields skuferry sends whose remote value differs (others on the remote are ignored)."""
    return [k for k, v in payload.items() if k not in remote or not same_value(v, remote[k])]
