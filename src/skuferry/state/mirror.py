"""The mirror: the SQLite state file, skuferry's truth about what it sent.

``Mirror`` is one object over one connection, made of its jobs, each a class of its own:

- ``WriteJournal``: each outcome of a remote call (and each create, update, archive
  or restore about to go out), committed before the next remote call that depends on it;
- ``BulkMarks``: marks over many rows between a run's stages (the walk, the gone,
  the back in step, the record digests learnt, the plan's refusals);
- ``RunReads``: what a run asks (rows for the planner, keys, intents, pending work);
- ``StatusReads``: what a person and the metrics are shown (``status``, ``rejected``);
- ``RunBook``: the runs opened and closed, and the ``meta`` names;
- ``HistoryBook``: each product's history of writes (``history``), read and pruned;
- ``ShapeBook``: the source's shape the runs learnt, accepted or refused (``shapes``);
- ``StateFile``: the open file itself, and the one write transaction all of them use.

Mixins rather than parts held by the mirror, so that each write still goes through the
mirror's own ``_write`` (the crash tests replace it there to kill a run before its n-th
transaction) and callers keep one object.

Every mutating method is one ``BEGIN IMMEDIATE`` ... ``COMMIT`` transaction,
durable (``synchronous=FULL``) before it returns. Only the engine's main
thread writes. ``readonly=True`` (dry run) opens the file with ``mode=ro`` and
never creates or migrates it; TEMP tables (the run's scratch space) still work
there, because they live outside the state file.

Column meaning, kept so the planner can trust ``MirrorRow.digest``:
``digest`` is the source product the remote is in step with and ``sent`` the
values skuferry last sent or found there (NULL when unknown; what an update is
diffed against); ``rejected_digest`` is what the API refused, read as
``MirrorRow.digest`` while the row is REJECTED; while it is ARCHIVED, it is the
[gone] patch's digest when the archive is in doubt (an archive or a restore sent, its
outcome not committed: ``record_archive_sent``, ``record_update_sent``), or a refused
restore's digest.

sqlite-utils builds the schema (``schema``) and serves the reads made for a
person (``status``, ``rejected``: ``rows_where``, rows as dicts by column name).
Plain ``sqlite3`` keeps every write and every read a run makes. Each write is one
``BEGIN IMMEDIATE`` transaction committed before the next remote call (sqlite-utils
would nest in it as a SAVEPOINT, but its ``upsert_all`` overwrites ``first_seen``),
and sqlite-utils' dict rows and per-call table introspection cost about half the
rows per second (``python -m bench --only statelib``); its import (50-100 ms) would
land on the no-op run. Scratch tables are TEMP tables, which sqlite-utils does not
create.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from skuferry import logs
from skuferry.state.bulk_marks import BulkMarks
from skuferry.state.history import HistoryBook
from skuferry.state.journal import WriteJournal
from skuferry.state.planstore import PlanStore
from skuferry.state.reads import MirrorLookup, SeenTable
from skuferry.state.remoteindex import RemoteIndex
from skuferry.state.run_reads import RunReads
from skuferry.state.runbook import API_CONTACT_META, RunBook
from skuferry.state.shapes import ShapeBook
from skuferry.state.status_reads import StatusReads

# Callers take the meta names from the mirror, as before its jobs had modules of their own.
__all__ = ["API_CONTACT_META", "Mirror"]

log = logs.get(__name__)


class Mirror(WriteJournal, BulkMarks, RunReads, StatusReads, RunBook, HistoryBook, ShapeBook):
    """The state file. See the module docstring for the contract of every write."""

    def __init__(
        self, path: Path, *, readonly: bool = False, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(path, readonly=readonly, clock=clock)
        self._known = MirrorLookup(self._conn)
        log.debug("mirror.opened", path=str(self.path), readonly=readonly)

    # -- scratch space for one run -------------------------------------------

    # The scratch tables (``scratch``): TEMP tables of this connection, so they
    # work in readonly mode and never touch the state file.

    def seen_table(self) -> SeenTable:
        """A fresh disk-backed (TEMP) mapping for ``plan(seen=...)``; fine in readonly mode."""
        return SeenTable(self._conn)

    def plan_store(self) -> PlanStore:
        """A fresh store for this run's plan; ``close()`` it when the run ends."""
        return PlanStore(self._conn)

    def remote_index(self, key_field: str) -> RemoteIndex:
        """A fresh, empty index of the remote catalog by ``key_field``; ``load()`` fills it."""
        return RemoteIndex(self._conn, key_field)
