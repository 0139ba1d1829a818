"""Updates whose answer was lost, settled in the same run: one read each, then commit or resend.

A PATCH or PUT (an update, a restore, the ``[gone]`` patch of an archive) answered
by a reset, a lost connection or a 5xx after the request went out
(``OutcomeUnknown``) may or may not have been applied. The write leaves its
journal in the mirror (``record_update_sent``, ``record_archive_sent``) and hands
the action over in ``Writer.unsettled``. After the other writes, each is read back
and the write itself records what the read found (``Write.found_applied``,
``Write.found_unapplied``, ``Write.given_up``):

- the product is read back (``GET /api/v1/products/:id``, one read);
- it holds what was sent (the owned fields, compared as ``fields.differing`` does;
  for an archive the patch's fields) → the write went through: committed as
  updated, restored or archived, no request more;
- it does not → the write did not land (or someone changed the product since): the
  remote's values become "last sent" (an archive: DRIFT, no longer in doubt) and the
  update goes out again, carrying what differs (with updates off, it is drift). Its
  answer may be lost again: at most ``rounds`` resends per product;
- the read fails, or the rounds run out → the product is failed (its journal stays,
  so the next run updates it again).

This mirrors how a lost create is settled (``check_then_create.second_look``): by
looking, never by sending blind; the mirror records what was sent before it goes
out and what the remote holds once it is known.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from skuferry import errors, logs
from skuferry.canonical import same_value
from skuferry.models import Action
from skuferry.state.mirror import Mirror
from skuferry.sync.write.writer import Writer

if TYPE_CHECKING:
    from skuferry.remote.client import RemoteApi  # a type; importing httpx costs ~0.1 s

log = logs.get(__name__)

DEFAULT_ROUNDS = 3


def differing(remote: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    """The fields of ``wanted`` the remote does not hold (null and absent are the same)."""
    return [
        name
        for name, value in wanted.items()
        if not (same_value(value, remote[name]) if name in remote else value is None)
    ]


def settle(client: RemoteApi, writer: Writer, mirror: Mirror, *, rounds: int) -> None:
    """Resolve ``writer.unsettled``: read each, commit or send again (``rounds`` times).

    What is still unsettled when the rounds run out, the run stops or the API fails is
    left in ``unsettled`` for ``give_up``.
    """
    for attempt in range(rounds + 1):
        todo, writer.unsettled = writer.unsettled, []
        if not todo:
            return
        log.info("sync.settle", products=len(todo), round=attempt + 1)
        again: list[Action] = []
        for i, action in enumerate(todo):
            if writer.stopped:  # a stop, or a fatal error: the rest keep their journal
                writer.unsettled.extend(todo[i:])
                break
            resend = _look(client, writer, mirror, action)
            if resend is not None:
                again.append(resend)
        if attempt == rounds:  # no resend left: they stay unsettled
            writer.unsettled.extend(again)
            return
        writer.run(again)


def _look(client: RemoteApi, writer: Writer, mirror: Mirror, action: Action) -> Action | None:
    """Read one product back: commit it (None) or the action to send again."""
    key, remote_id = action.key or "", action.remote_id or ""
    try:
        remote = client.get_product(remote_id)
    except errors.NotFound:
        # Deleted on the remote meanwhile: forget the id, the next run looks it up.
        mirror.record_remote_missing(key)
        writer.summary.fail(
            key, f"remote id {remote_id} no longer exists; looked up and created again next run"
        )
        log.warning("sync.settle.missing", key=key, remote_id=remote_id)
        return None
    except errors.Interrupted:
        writer.unsettled.append(action)  # stopping: its journal stays for next run
        return None
    except errors.AuthError as exc:
        writer.fatal = writer.fatal or exc
        writer.unsettled.append(action)
        return None
    except errors.ApiError as exc:
        writer.unsettled.append(action)  # left for give_up, with this reason
        if isinstance(exc, errors.Unreachable | errors.TransportError | errors.BadResponse):
            writer.fatal = writer.fatal or exc
        log.warning("sync.settle.read_failed", key=key, error=str(exc))
        return None
    write = writer.write_of(action)
    sent = mirror.payload(key)  # the journal: what was sent, minus the fields in doubt
    wanted = write.expected(sent)
    off = differing(remote, wanted)
    if not off:
        write.found_applied(sent, wanted)
        log.info("sync.settle.applied", key=key, remote_id=remote_id, kind=action.kind.value)
        return None
    log.info("sync.settle.resend", key=key, remote_id=remote_id, fields=off)
    write.found_unapplied(remote, sent, wanted)
    return action


def give_up(writer: Writer, mirror: Mirror) -> None:
    """What could not be settled in this run is failed; its journal makes the next run send
    it again (an update's digest is unknown, a restore stays ARCHIVED, an archive stays in
    doubt)."""
    reason = "the answer to the update was lost and it could not be confirmed in this run"
    for action in writer.unsettled:
        writer.write_of(action).given_up(f"outcome unknown: {reason}")
        writer.summary.fail(action.key or "", f"{reason}; sent again next run", replace=False)
    writer.unsettled = []
