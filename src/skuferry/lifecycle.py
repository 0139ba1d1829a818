"""A product's lifecycle in the mirror: its states, what they mean, and the SQL that selects them.

Each rule is written here twice, side by side: as a Python predicate over what the
mirror knows about one key (the planner and the writer ask it), and as a SQL fragment
over the state file's ``products`` table (the mirror's queries select rows with it).
The SQL is built from the same sets of states, and a test holds every predicate to its
fragment over generated rows, so the two cannot drift apart.

Pure: no I/O and no database here, only text. Column meaning, as the fragments use it:
``digest`` is the source product the remote is in step with; ``rejected_digest`` is what
the API refused, and, while a row is ARCHIVED, the ``[gone]`` patch's digest when the
archive is in doubt. A row as the planner reads it shows ``rejected_digest`` as its
digest while it is REJECTED or ARCHIVED (see ``ROW_DIGEST_FROM_REFUSED``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Protocol


class State(enum.StrEnum):
    """Where a product stands in the mirror."""

    SYNCED = "synced"  # the remote holds ``digest`` under ``remote_id``
    PENDING = "pending"  # a create was started; an intent may be open (outcome unknown)
    FAILED = "failed"  # the last attempt failed transiently; retried next run
    REJECTED = "rejected"  # the API or the mapping refused ``digest``; retried when data change
    DRIFT = "drift"  # the source changed but updates are not possible (update_method / 405)
    DUPLICATE = "duplicate"  # the remote holds several products with this key
    GONE = "gone"  # no longer in the source; never deleted remotely
    REMOTE_ONLY = "remote_only"  # found on the remote by a walk, never in this source
    ARCHIVED = "archived"  # left the source and got the [gone] patch, once; restored on return

    @property
    def in_source(self) -> bool:
        """Whether the source holds (or last held) this product."""
        return self not in OUT_OF_SOURCE


class Row(Protocol):
    """What the mirror knows about one key, as the predicates read it (``MirrorRow``)."""

    @property
    def state(self) -> State: ...

    @property
    def digest(self) -> str | None: ...

    @property
    def remote_id(self) -> str | None: ...

    @property
    def intent_digest(self) -> str | None: ...

    @property
    def last_error(self) -> str | None: ...

    @property
    def record_digest(self) -> str | None: ...


def _one_of(states: Iterable[State]) -> str:
    """The states as a SQL list of their stored names, in a fixed order."""
    return ", ".join(f"'{state.value}'" for state in sorted(states))


# The source no longer holds these products (or never did): a plan decides nothing gone
# for them, and the guards do not count them among the products known.
OUT_OF_SOURCE = frozenset({State.GONE, State.REMOTE_ONLY, State.ARCHIVED})
IN_SOURCE_SQL = f"state NOT IN ({_one_of(OUT_OF_SOURCE)})"

# A row in these states may stand for a product already on the remote that the mirror
# cannot point to: a create must look it up before it may POST.
MAY_EXIST = frozenset({State.PENDING, State.DUPLICATE, State.REMOTE_ONLY})


# The error a row keeps once its remote id answered 404 (``Mirror.record_remote_missing``
# writes it, with the id between the two): the mark ``remote_id_lost`` reads.
REMOTE_ID_GONE = ("remote id ", " no longer exists")


def remote_id_lost(row: Row) -> bool:
    """Whether the row's product answered 404 at its remote id: PENDING with no remote id,
    no create in doubt, and the 404's error. Staff may have made it again on the CMS just
    before, so a walk proves it absent only once the list could show what was made before
    that 404 (``[api] list_lag_s``; ``Mirror.unseen_since``). A create that never went
    out also leaves a row PENDING without an id, but nothing of it can be on the CMS."""
    error = row.last_error or ""
    return (
        row.state is State.PENDING
        and row.remote_id is None
        and row.intent_digest is None
        and error.startswith(REMOTE_ID_GONE[0])
        and error.endswith(REMOTE_ID_GONE[1])
    )


# ``remote_id_lost`` for the products table (unaliased or as ``p``).
REMOTE_ID_LOST_SQL = (
    f"state = '{State.PENDING.value}' AND remote_id IS NULL "  # noqa: S608 - our constants
    f"AND last_error LIKE '{REMOTE_ID_GONE[0]}%{REMOTE_ID_GONE[1]}' "
    "AND key NOT IN (SELECT i.key FROM intents i)"
)

# States whose ``digest`` is what the remote holds and where nothing was left in doubt,
# so an equal source digest means nothing to send.
IN_STEP_WHEN_EQUAL = frozenset({State.SYNCED, State.DRIFT, State.GONE})


def in_step_with(row: Row, digest: str) -> bool:
    """Whether the remote holds ``digest`` under the row's id: nothing to send."""
    return row.remote_id is not None and row.state in IN_STEP_WHEN_EQUAL and row.digest == digest


# Rows planned unchanged that are not SYNCED yet (the remote holds their data again): a
# run that found them in step makes them SYNCED.
BACK_IN_STEP = IN_STEP_WHEN_EQUAL - {State.SYNCED}
BACK_IN_STEP_SQL = f"state IN ({_one_of(BACK_IN_STEP)}) AND digest IS NOT NULL"

# The states whose row reads its digest from ``rejected_digest``: what was refused, or
# for an ARCHIVED row what is in doubt (the [gone] patch) or a refused restore's data.
ROW_DIGEST_FROM_REFUSED = frozenset({State.REJECTED, State.ARCHIVED})


def recognisable(row: Row) -> bool:
    """Whether a source row whose record digest equals the row's leaves the product unchanged
    without being mapped: SYNCED under a confirmed digest, no create in doubt."""
    return (
        row.state is State.SYNCED
        and row.intent_digest is None
        and row.digest is not None
        and row.record_digest is not None
    )


# ``recognisable`` for the products table as ``p`` ("+p.state": the key index, not the
# state index, which would walk every SYNCED row); the intents are asked apart
# (``RECOGNISABLE_NO_INTENT_SQL``), and only when any is open.
RECOGNISABLE_SQL = (
    f"+p.state = '{State.SYNCED.value}' AND p.digest IS NOT NULL "
    "AND p.source_fingerprint IS NOT NULL"
)
RECOGNISABLE_NO_INTENT_SQL = "NOT EXISTS (SELECT 1 FROM intents i WHERE i.key = p.key)"

# SYNCED under a remote id: a product the CMS holds as skuferry last sent it.
ON_REMOTE_SQL = f"state = '{State.SYNCED.value}' AND remote_id IS NOT NULL"


def archive_in_doubt(row: Row, archiving: str | None) -> bool:
    """Whether the row's ``[gone]`` patch (``archiving``: its digest) went out and its answer
    never came: ARCHIVED under the patch's digest. The product may be archived on the CMS
    or not; away from the source the patch is sent again, back in it the product is
    restored (restore table and all)."""
    return archiving is not None and row.state is State.ARCHIVED and row.digest == archiving


# ``archive_in_doubt`` with the patch's digest as its one parameter; the column is
# ``rejected_digest``, which the row shows as its digest while ARCHIVED.
ARCHIVE_IN_DOUBT_SQL = f"(state = '{State.ARCHIVED.value}' AND rejected_digest = ?)"


def archive_refused(row: Row, archiving: str | None) -> bool:
    """Whether the API refused this very ``[gone]`` patch for the row (REJECTED under the
    patch's digest): not sent again until the patch changes."""
    return archiving is not None and row.state is State.REJECTED and row.digest == archiving


def state_sql(states: Iterable[State]) -> str:
    """The rows in one of ``states`` (none: no row)."""
    names = _one_of(set(states))
    return f"state IN ({names})" if names else "0"
