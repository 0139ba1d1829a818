"""Who owns which field: what an update carries, what a PUT merges, what counts as in step.

Pure: plain dicts in, plain dicts out, no I/O.

skuferry owns the fields its mapping produces, except ``create_only`` ones:
those go out when the product is created and belong to the CMS from then on
(shop staff may rewrite a description; skuferry never sends it again).

``sent`` is what skuferry last sent for a product, per field, as the mirror
keeps it. An update carries only the owned fields whose value differs from
it, so an edit on the CMS side of any other field survives. ``sent is None``
means "not known" (a product linked by a walk): every owned field goes out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from skuferry.canonical import same_value
from skuferry.config.schema import MappingSettings

Fields = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Ownership:
    """The mapping's say on fields: which are create-only, and whether dropped ones go out null."""

    create_only: frozenset[str] = frozenset()
    send_nulls: bool = False

    @classmethod
    def from_mapping(cls, mapping: MappingSettings) -> Ownership:
        return cls(create_only=mapping.create_only, send_nulls=mapping.send_nulls)

    def owned(self, payload: Fields) -> dict[str, Any]:
        """The fields of ``payload`` skuferry keeps in step after creation."""
        return {k: v for k, v in payload.items() if k not in self.create_only}


def changes(current: Fields, sent: Fields | None, ownership: Ownership) -> dict[str, Any]:
    """The PATCH body: owned fields whose value differs from what was last sent.

    A field the source dropped (in ``sent``, not in ``current``) goes out as
    ``null`` only with ``send_nulls``; otherwise the remote keeps its value.
    An empty result means nothing to send.
    """
    if sent is None:
        return ownership.owned(current)
    body = {
        k: v
        for k, v in current.items()
        if k not in ownership.create_only and (k not in sent or not same_value(v, sent[k]))
    }
    if ownership.send_nulls:
        for k in dropped(current, sent, ownership):
            if sent[k] is not None:
                body[k] = None
    return body


def dropped(current: Fields, sent: Fields, ownership: Ownership) -> list[str]:
    """Owned fields last sent that the source no longer gives."""
    return [k for k in sent if k not in current and k not in ownership.create_only]


def after_update(sent: Fields | None, body: Fields, current: Fields) -> dict[str, Any]:
    """What was last sent once ``body`` is applied: a field nulled because it was dropped is
    forgotten (the remote holds null, the source nothing: they agree)."""
    merged = {**(sent or {}), **body}
    for k, v in body.items():
        if v is None and k not in current:
            del merged[k]
    return merged


def put_body(
    current: Fields, remote: Fields, sent: Fields | None, ownership: Ownership
) -> dict[str, Any]:
    """A PUT replaces the whole product: the remote's values of every field skuferry does not
    own (create-only ones included), then the owned fields of ``current`` over them.

    ``id`` stays out (the server owns ids); a dropped field is nulled only with ``send_nulls``.
    """
    body = {k: v for k, v in remote.items() if k != "id"}
    if ownership.send_nulls and sent is not None:
        for k in dropped(current, sent, ownership):
            body[k] = None
    body.update(ownership.owned(current))
    return body


def differing(current: Fields, remote: Fields, ownership: Ownership) -> list[str]:
    """Owned fields the remote does not hold as ``current`` has them (adoption, --verify).

    Numbers compare by value (the server may write 19.9 for 19.90); fields the
    remote has beyond these, and create-only ones, are not looked at.
    """
    return [
        k
        for k, v in current.items()
        if k not in ownership.create_only and (k not in remote or not same_value(v, remote[k]))
    ]
