"""What one update, restore or archive sends, and the requests it takes (run in a worker).

The field rules (which fields are owned, what the ``[gone]`` tables carry) are
applied here to one product against the API:

- PATCH carries only the owned fields that changed since they were last sent:
  one write, or no request at all when nothing owned changed;
- PUT replaces the whole product, so the product is read first (one read) and
  the remote's values of every field skuferry does not own go back unchanged;
- when the mirror does not know what was last sent (a product found on the
  remote by a walk), the product is read first and compared: in step means no
  write at all (an adoption by comparison).

Nothing here touches the mirror: the write that asked (``actions.Update``,
``actions.Archive``) commits what ``Outcome`` says, on the writer's thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from skuferry.models import Product
from skuferry.sync.write import fields, gone
from skuferry.sync.write.fields import Ownership
from skuferry.sync.write.gone import GonePolicy

if TYPE_CHECKING:
    from skuferry.remote.client import RemoteApi  # a type; importing httpx costs ~0.1 s


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a job did: the fields now last sent, and whether it wrote or read."""

    sent: dict[str, Any]
    wrote: bool
    adopted: bool = False  # nothing was known of the remote's values: they were read
    # (before, after) of the fields it changed, when it read the product first: the
    # history's change as found on the wire (else the journal's, from what was last sent)
    change: tuple[dict[str, Any], dict[str, Any]] | None = None


class Updater:
    def __init__(
        self,
        client: RemoteApi,
        *,
        method: Literal["patch", "put"],
        ownership: Ownership,
        policy: GonePolicy,
    ) -> None:
        self._client = client
        self._method = method
        self._own = ownership
        self._policy = policy

    def nothing_to_send(
        self, product: Product, sent: Mapping[str, Any] | None, *, restore: bool
    ) -> bool:
        """True when no request is needed (known ``sent``, no owned field changed)."""
        return sent is not None and not self._patch(product, sent, restore=restore)

    def in_flight(
        self, product: Product, sent: Mapping[str, Any] | None, *, restore: bool
    ) -> set[str]:
        """The fields whose remote value is in doubt while this update is on the wire."""
        if sent is not None and self._method == "patch":
            return set(self._patch(product, sent, restore=restore))
        names = set(self._own.owned(product.payload))
        if sent is not None and self._own.send_nulls:
            names.update(fields.dropped(product.payload, sent, self._own))
        if restore:
            names.update(self._policy.restore)
        return names

    def sending(
        self, product: Product, sent: Mapping[str, Any] | None, *, restore: bool
    ) -> dict[str, Any]:
        """The fields ``in_flight`` with the values they go out with (the history's change)."""
        if sent is not None and self._method == "patch":
            return self._patch(product, sent, restore=restore)
        return self.expected(product, sent, restore=restore)

    def expected(
        self, product: Product, sent: Mapping[str, Any] | None, *, restore: bool
    ) -> dict[str, Any]:
        """What the remote holds once this update went through: the fields to compare.

        The owned fields of the product (plus the ``[gone] restore`` table under them for
        a restore); a dropped field is expected null only with ``send_nulls``.
        """
        want = self._own.owned(product.payload)
        if restore:
            want = {**self._policy.restore, **want}
        if sent is not None and self._own.send_nulls:
            for name in fields.dropped(product.payload, sent, self._own):
                want.setdefault(name, None)
        return want

    def update(
        self, remote_id: str, product: Product, sent: Mapping[str, Any] | None, *, restore: bool
    ) -> Outcome:
        """Bring one product in step (``restore``: plus the [gone] restore table)."""
        remote: dict[str, Any] | None = None
        adopted = sent is None
        if sent is None or self._method == "put":
            remote = self._client.get_product(remote_id)
        basis: Mapping[str, Any] = (
            {k: remote[k] for k in product.payload if k in remote}
            if sent is None and remote is not None
            else (sent or {})
        )
        changed = fields.changes(product.payload, basis, self._own)
        patch = self._patch(product, basis, restore=restore)
        if not patch:
            return Outcome(dict(basis), wrote=False, adopted=adopted)
        if remote is not None and self._method == "put":
            body = fields.put_body(product.payload, remote, basis, self._own)
            if restore:
                owned = self._own.owned(product.payload)
                body.update({k: v for k, v in self._policy.restore.items() if k not in owned})
        else:
            body = patch
        self._client.update_product(remote_id, body, method=self._method)
        change = None
        if remote is not None:
            change = ({k: remote[k] for k in patch if k in remote}, patch)
        return Outcome(
            fields.after_update(basis, changed, product.payload),
            wrote=True,
            adopted=adopted,
            change=change,
        )

    def archive(self, remote_id: str, sent: Mapping[str, Any] | None) -> Outcome:
        """Send the [gone] patch: PATCH as it is, PUT over the product as read."""
        patch = dict(self._policy.patch)
        self.put_back(remote_id, patch)
        return Outcome(gone.sent_after_archive(sent, patch), wrote=True)

    def put_back(self, remote_id: str, fields: Mapping[str, Any]) -> None:
        """Set exactly ``fields`` (the [gone] patch, an undo's values): PATCH them as they
        are, PUT them over the product as read."""
        body = dict(fields)
        if self._method == "put":
            remote = self._client.get_product(remote_id)
            body = {**{k: v for k, v in remote.items() if k != "id"}, **body}
        self._client.update_product(remote_id, body, method=self._method)

    def _patch(self, product: Product, sent: Mapping[str, Any], *, restore: bool) -> dict[str, Any]:
        changed = fields.changes(product.payload, sent, self._own)
        return gone.restore_body(changed, self._policy.restore) if restore else changed
