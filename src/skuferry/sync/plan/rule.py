"""The rule: what one product needs, given what the mirror knows about its key. Pure.

``decide()`` answers for a product the source holds: create (after a lookup when its
absence on the remote is not known), update, restore, leave unchanged, or leave it
refused. ``leaving()`` answers for a key the source no longer holds: GONE, or ARCHIVE
under ``[gone] action = "patch"``. The states and their predicates are the product's
lifecycle (``lifecycle``); this module only says which action each one calls for.

Who may POST without a lookup: only a create whose absence on the remote is known,
i.e. a full remote walk was recorded (``walked``) and nothing about the key says "it
may be there" (an open intent, a PENDING or DUPLICATE row).
"""

from __future__ import annotations

from skuferry.lifecycle import MAY_EXIST, archive_in_doubt, archive_refused, in_step_with
from skuferry.models import Action, Kind, MirrorRow, Product, State


def decide(
    product: Product, row: MirrorRow | None, *, walked: bool, resend: bool = False
) -> Action:
    """What to do with ``product`` given the mirror's ``row`` for its key.

    ``row.digest`` is the digest last confirmed on the remote, except for a
    REJECTED row, where it is the digest the API (or mapping) refused.
    ``resend`` (``skuferry retry``): data the API refused are sent again, by the
    same rules as a change (an update, or a create after a lookup when needed).
    """

    def create(*, lookup: bool = False) -> Action:
        return Action(
            Kind.CREATE,
            product.key,
            product,
            line=product.line,
            lookup_first=lookup or not walked,
        )

    def update(remote_id: str) -> Action:
        return Action(Kind.UPDATE, product.key, product, remote_id=remote_id, line=product.line)

    def unchanged() -> Action:
        remote_id = row.remote_id if row else None
        return Action(Kind.UNCHANGED, product.key, product, remote_id=remote_id, line=product.line)

    if row is None:
        return create()
    if row.intent_digest is not None:
        return create(lookup=True)  # a POST may have landed: resolve by lookup, never re-POST blind
    if row.state is State.REJECTED:
        if row.digest == product.digest and not resend:
            return Action(
                Kind.STILL_REJECTED, product.key, product, line=product.line, reason=row.last_error
            )
        return update(row.remote_id) if row.remote_id else create()
    if row.state is State.DUPLICATE:
        return create(lookup=True)  # the engine re-checks the remote before anything else
    if row.state is State.ARCHIVED and row.remote_id is not None:
        # Back in the source: the remote holds (or may hold) the [gone] patch, so whatever
        # the digest it is restored, unless this very data was refused as a restore.
        if row.digest == product.digest and not resend:
            return Action(
                Kind.STILL_REJECTED, product.key, product, line=product.line, reason=row.last_error
            )
        return Action(
            Kind.RESTORE, product.key, product, remote_id=row.remote_id, line=product.line
        )
    if row.remote_id is not None:
        return unchanged() if in_step_with(row, product.digest) else update(row.remote_id)
    return create(lookup=row.state in MAY_EXIST)


def leaving(row: MirrorRow, *, archiving: str | None) -> Kind | None:
    """What to do with a key the source no longer holds; None: nothing (already dealt with).

    Without ``archiving`` a product in the source becomes GONE. With it, a
    product the remote holds under a known id is ARCHIVEd once, also one marked
    GONE before archiving was turned on; an ARCHIVED row stays as it is (unless
    its archive is in doubt, ``archive_in_doubt``: sent again), and so does one
    whose archive the API refused (``archive_refused``) until the patch changes.
    A create in doubt (open intent), a DUPLICATE or a product never created is
    only marked GONE. A PENDING row without a remote id (its product answered
    404: it may be re-created on the CMS) stays PENDING, so its return looks the
    key up before any POST.
    """
    in_doubt = archive_in_doubt(row, archiving)
    lost_id = row.state is State.PENDING and row.remote_id is None and row.intent_digest is None
    if archive_refused(row, archiving) or lost_id:
        return None
    if row.state in (State.ARCHIVED, State.REMOTE_ONLY) and not in_doubt:
        return None
    can_archive = (
        archiving is not None
        and row.remote_id is not None
        and row.intent_digest is None
        and row.state is not State.DUPLICATE
    )
    if can_archive:
        return Kind.ARCHIVE
    return Kind.GONE if row.state.in_source else None
