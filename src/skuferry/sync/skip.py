"""A run whose source did not change reads nothing: the skip decision.

A daemon polling every few minutes spends most of its runs confirming that
nothing changed. Each source reports a cheap change token (``Source.change_token``:
a local file's ``stat()``, a remote file's ETag or Last-Modified by a conditional GET,
a SQL table's row count and newest ``updated_column``). A run may skip reading and
planning when

- the change token (and each ``[[join]]`` source's signature, and each
  ``[mapping.tables]`` file's change token) is known and equals
  the one stored by the last run that *committed* (all its writes landed, nothing
  interrupted), together with the same config (``identity``: the whole effective
  config, secrets masked, and the skuferry version, which decides how rows are mapped);
- nothing is pending in the mirror (``pending_states``, an open create intent, an
  archive in doubt): work the next run would do even on the same source;
- the run is not asked to look further: not a dry run, not ``--full`` or
  ``--verify``, and not the every-``full_every``-th full pull of an incremental
  source.

Such a run reports ``"pull": "unchanged"``, its products in step as unchanged,
and repeats the last committed run's rejected rows and drift (with their problems,
so its exit code is the one a run that read the file would have). It still makes
the auth check when one is due, and counts toward ``full_every``.

The stored skip token is removed when a run that reads the source starts, and
written again only once that run commits: a run that fails, stops or is refused by
a guard leaves none, so the next run reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from skuferry import __version__, logs
from skuferry.config.raw import digest
from skuferry.models import RunOptions, RunSummary, State
from skuferry.sources.base import IncrementalSource, Source

if TYPE_CHECKING:  # the quick lane imports this module without pydantic
    from skuferry.config.schema import Settings
    from skuferry.errors import SkuferryError

# the engine's events, under the engine's logger: a log reader sees one kind of skipped run,
# whether the engine or the quick lane skipped it
log = logs.get("skuferry.sync.engine")

# The skip token: the last commit's config identity, the source's change token and the
# join signatures, one a line (stored under the name it had before it was called so).
SKIP_META = "source.fingerprint"
CARRIED = "source.carried"  # JSON: that run's standing counts, repeated by a skipped run
# the counts a skipped run repeats: what a run over the same source would report again
CARRIED_FIELDS = ("rejected", "rows_rejected", "drift", "problems")
NOTE = "source unchanged since the last complete run: nothing read or sent"


class Metas(Protocol):
    def get_meta(self, name: str) -> str | None: ...

    def set_metas(self, values: Mapping[str, str | None]) -> None: ...


class Runs(Metas, Protocol):
    """The mirror as a skipped run reads and records it."""

    def counts_by_state(self) -> dict[str, int]: ...

    def finish_run(
        self, run_id: int, *, status: str, exit_code: int, summary: dict[str, Any]
    ) -> None: ...


class Pending(Protocol):
    def has_pending(self, states: Iterable[State], *, archiving: str | None = None) -> bool: ...

    def handed_keys(self) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class Decision:
    """What the check found: the token to store once this run commits, and the verdict."""

    token: str | None  # None: the source cannot tell cheaply (never stored)
    skip: bool = False
    reason: str = ""


def identity(settings: Settings) -> str:
    """Changes with any setting (secrets masked, so a rotated key is no change) or version.

    Loaded settings carry the identity of what the loader read (the raw reading's), which
    the quick lane computes from its own reading the same way: one decision, two callers.
    Settings built in code have no reading: theirs is their effective config's digest."""
    read = settings.read_identity
    if read is not None:
        return read
    return digest({"version": __version__, "config": settings.redacted()})


def token(identity: str, parts: Iterable[str | None]) -> str | None:
    """What a run that commits stores, and what the next compares: the config's identity
    and each change token (the source's, the joins', the table files'); None: a part
    cannot be told cheaply, so nothing can be skipped."""
    found = list(parts)
    return None if not found or None in found else "\n".join([identity, *map(str, found)])


def joined(settings: Settings, joins: list[str | None] | None = None) -> list[str | None]:
    """Each ``[[join]]`` source's signature and each table file's
    change token: a join or table file that changed changes the products as much as the
    source does. None in the list: cannot be told. ``joins``: the joins' tokens as this
    run took them when it opened them (``pieces.join_tokens``), so none is asked twice."""
    found: list[str | None] = []
    if joins is not None and len(joins) == len(settings.join):
        found.extend(joins)
    elif settings.join:
        from skuferry.sources.signature import source_signature

        found.extend(source_signature(spec.source) for spec in settings.join)
    from skuferry.config.schema import TableFile

    tables = [t for t in settings.mapping.tables.values() if isinstance(t, TableFile)]
    if tables:
        from skuferry.sources.change_token import file_change_token

        found.extend(file_change_token(table.file) for table in tables)
    return found


def pending_states(settings: Settings) -> tuple[State, ...]:
    """States a run works on again with the same source: retries, creates in doubt,
    duplicates to re-check, and drift while updates may work (probed again each run)."""
    states = (State.PENDING, State.FAILED, State.DUPLICATE)
    return states if settings.api.update_method == "none" else (*states, State.DRIFT)


def has_pending_work(mirror: Pending, states: Iterable[State], archiving: str | None) -> bool:
    """Work a run does even on the same source: ``states`` (``pending_states``), an open
    intent, an archive in doubt (``archiving``: the [gone] patch), keys queued for the
    urgent lane. Indexed reads that stop at the first row found."""
    return mirror.has_pending(states, archiving=archiving) or bool(mirror.handed_keys())


def decide(
    settings: Settings,
    metas: Metas,
    source: Source,
    *,
    options: RunOptions,
    full_pull: bool,
    pending: Callable[[], bool],
    joins: list[str | None] | None = None,
) -> Decision:
    """The skip token this run stores if it commits, and whether it may skip.

    ``pending`` (the mirror's ``has_pending``) is asked last, only when all else says skip.
    ``joins``: the joins' tokens taken as the run opened them (see ``joined``).
    """
    stored = metas.get_meta(SKIP_META)
    previous = stored.split("\n")[1] if stored and "\n" in stored else None
    change_token = source.change_token(previous or None)
    parts = [change_token, *joined(settings, joins)] if change_token is not None else [None]
    now = token(identity(settings), parts)
    if options.dry_run or options.full or options.verify:
        return Decision(now, reason="asked to read (--dry-run, --full or --verify)")
    if isinstance(source, IncrementalSource) and source.incremental and full_pull:
        return Decision(now, reason="a full pull is due")
    why = must_read(now, stored, pending)
    return Decision(now, skip=why is None, reason=why or "source unchanged")


def must_read(now: str | None, stored: str | None, pending: Callable[[], bool]) -> str | None:
    """Why a run must read its source (None: it may skip): its skip token ``now`` against
    the one ``stored`` by the last commit, then ``pending`` work, asked last. The engine
    and the quick lane both decide by it."""
    if now is None:
        return "the source has no cheap fingerprint"
    if now != stored:
        return "the source or the config changed since the last commit"
    if pending():
        return "retries, creates in doubt or drift are pending"
    return None


def carry(summary: RunSummary, metas: Metas, *, in_step: int) -> None:
    """Fill a skipped run's summary: ``in_step`` (SYNCED products) unchanged, and the
    rejected rows and drift of the run it repeats."""
    try:
        carried: dict[str, Any] = json.loads(metas.get_meta(CARRIED) or "{}")
    except ValueError:
        carried = {}
    summary.pull = "unchanged"
    summary.notes.append(NOTE)
    summary.unchanged = in_step
    summary.rejected = int(carried.get("rejected", 0))
    summary.rows_rejected = int(carried.get("rows_rejected", 0))
    summary.drift = int(carried.get("drift", 0))
    for problem in carried.get("problems", []):
        summary.add_problem(problem.get("key"), problem.get("line"), str(problem.get("reason")))


def skipped_run(summary: RunSummary, mirror: Runs) -> None:
    """The skipped run's output, for the engine and the quick lane alike: its summary
    (``carry``: the products in step unchanged) and the check's log event."""
    carry(summary, mirror, in_step=mirror.counts_by_state().get(State.SYNCED, 0))
    log.info("sync.source.checked", skip=True, why="source unchanged")


def record(
    mirror: Runs, run_id: int | None, summary: RunSummary, *, error: SkuferryError | None = None
) -> None:
    """The run's row in the runs table: its status, exit code and JSON summary (with the
    error that ended it, if one did). A dry run (``run_id`` None) leaves none."""
    if run_id is None:
        return
    if error is not None:
        data = {**summary.as_json(), "error": str(error)}
        mirror.finish_run(run_id, status="error", exit_code=error.exit_code, summary=data)
    else:
        mirror.finish_run(
            run_id, status=summary.status, exit_code=summary.exit_code, summary=summary.as_json()
        )


def finished(summary: RunSummary) -> dict[str, Any]:
    """The run's last log event (its summary but the problems); its JSON summary."""
    data = summary.as_json()
    log.info("sync.finished", **{k: v for k, v in data.items() if k != "problems"})
    return data


def forget(metas: Metas) -> None:
    """A run that reads the source starts: the stored skip token no longer holds."""
    if metas.get_meta(SKIP_META) is not None:
        metas.set_metas({SKIP_META: None, CARRIED: None})


def remember(metas: Metas, token: str | None, summary: RunSummary) -> None:
    """After a run committed (every write landed): its skip token and standing counts."""
    if token is None:
        return
    data = summary.as_json()
    carried = {name: data[name] for name in CARRIED_FIELDS}
    metas.set_metas({SKIP_META: token, CARRIED: json.dumps(carried, ensure_ascii=False)})
