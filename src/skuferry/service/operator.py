"""The operator's hands: the dead letters, re-driving them, syncing named keys.

- ``rejected``: the products the last runs left refused or failed
  (``state/deadletters.py``), as text, JSON or a CSV file (0600: catalog data).
- ``retry``: a named run of those keys with their refusals forgotten (the
  planner's ``resend``): sent again by the normal rules (check-then-create,
  budgets, field ownership), then each key's outcome read back from the mirror.
- ``hand_over``: a named run while another run holds the lock: the keys go to
  that run's urgent lane (``sync/write/lanes.py``) through the state file; when the
  other run ends first, this process runs them itself.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from skuferry import errors, files
from skuferry.config.schema import Settings
from skuferry.models import MirrorRow, RunSummary, State
from skuferry.state.deadletters import DeadLetter
from skuferry.state.lock import run_lock
from skuferry.state.mirror import LANE_META, Mirror

CSV_COLUMNS = (
    "key",
    "stage",
    "reason",
    "status",
    "message",
    "source",
    "line",
    "first_seen",
    "last_seen",
)
HAND_OVER_WAIT_S = 120.0


def dead_letters(settings: Settings, keys: Sequence[str] | None = None) -> list[DeadLetter]:
    mirror = Mirror(settings.state.path, readonly=True)
    try:
        return mirror.dead_letters(keys)
    finally:
        mirror.close()


def print_letters(letters: Sequence[DeadLetter], out: IO[str]) -> None:
    if not letters:
        out.write("no rejected or failed products\n")
        return
    out.write(f"{len(letters)} rejected or failed product(s):\n")
    for letter in letters:
        data = letter.as_json()
        where = f"{letter.source or '?'}:{letter.line}" if letter.line else letter.source or ""
        status = f" HTTP {letter.status}" if letter.status is not None else ""
        key = letter.key if letter.key is not None else "(no key)"
        out.write(
            f"  {key}  [{letter.stage}{status}]  {where}  since {data['first_seen']}\n"
            f"      {letter.reason}\n"
        )
    out.write("send them again with `skuferry retry KEY ...` or `skuferry retry --all`\n")


def letters_json(letters: Sequence[DeadLetter]) -> str:
    return json.dumps([letter.as_json() for letter in letters], ensure_ascii=False)


def write_csv(letters: Sequence[DeadLetter], path: Path) -> None:
    """The list as CSV, created 0600 (it names products and the API's messages)."""
    files.create_private(path)
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        out.writeheader()
        for letter in letters:
            row = letter.as_json()
            out.writerow({k: "" if row[k] is None else row[k] for k in CSV_COLUMNS})


# -- retry ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    key: str
    result: str  # sent | unchanged | refused | failed | unknown | missing | other
    detail: str

    def as_json(self) -> dict[str, Any]:
        return {"key": self.key, "result": self.result, "detail": self.detail}


def retry_keys(settings: Settings, keys: Sequence[str], *, every: bool) -> list[str]:
    """The keys to retry: those named, or every dead letter's (``--all``)."""
    if every:
        return [letter.key for letter in dead_letters(settings) if letter.key is not None] + list(
            keys
        )
    return list(keys)


def rows(settings: Settings, keys: Sequence[str]) -> dict[str, MirrorRow]:
    mirror = Mirror(settings.state.path, readonly=True)
    try:
        return mirror.rows(list(keys))
    finally:
        mirror.close()


def outcomes(
    keys: Sequence[str],
    before: dict[str, MirrorRow],
    after: dict[str, MirrorRow],
    letters: Sequence[DeadLetter],
    summary: RunSummary,
) -> list[Outcome]:
    """What became of each key, read back from the mirror after the run."""
    letter_of = {letter.key: letter for letter in letters}
    missing = {p["key"] for p in summary.problems if p.get("reason") == "not in the source"}
    found: list[Outcome] = []
    for key in dict.fromkeys(keys):
        old, new, letter = before.get(key), after.get(key), letter_of.get(key)
        if key in missing:
            found.append(Outcome(key, "missing", "not in the source"))
        elif letter is not None:
            status = f", HTTP {letter.status}" if letter.status is not None else ""
            result = "failed" if new is not None and new.state is State.FAILED else "refused"
            found.append(Outcome(key, result, f"{letter.stage}{status}: {letter.reason}"))
        elif new is None:
            found.append(Outcome(key, "missing", "not in the source"))
        elif new.state is State.SYNCED:
            same = old is not None and old.state is State.SYNCED and old.digest == new.digest
            where = f"id {new.remote_id}"
            if same:
                found.append(Outcome(key, "unchanged", f"already in step on the CMS ({where})"))
            else:
                was = "no remote id before" if old is None or old.remote_id is None else "updated"
                found.append(Outcome(key, "sent", f"in step on the CMS ({where}; {was})"))
        elif new.state is State.PENDING:
            found.append(Outcome(key, "unknown", "outcome unknown: looked up before any re-send"))
        else:
            found.append(Outcome(key, new.state.value, new.last_error or new.state.value))
    return found


def print_outcomes(found: Sequence[Outcome], out: IO[str]) -> None:
    width = max((len(o.key) for o in found), default=0)
    for o in found:
        out.write(f"  {o.key.ljust(width)}  {o.result:9}  {o.detail}\n")


# -- a named run while another run holds the lock -----------------------------------------


def hand_over(
    settings: Settings,
    keys: Sequence[str],
    run_here: Callable[[], RunSummary],
    *,
    wait_s: float = HAND_OVER_WAIT_S,
    poll_s: float = 0.25,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> RunSummary | None:
    """Give ``keys`` to the run holding the lock (None once it took them), or run them here.

    The keys wait in the state file (meta rows ``lane.<key>``) until the running run's
    urgent lane takes them. If that run ends first, ``run_here()`` runs them in this
    process. Raises ``LockHeld`` when neither happened within ``wait_s``: the keys stay
    queued, for the running run or the next one.
    """
    mirror = Mirror(settings.state.path)
    try:
        mirror.set_metas({LANE_META + key: str(time.time()) for key in keys})
        deadline = clock() + wait_s
        while True:
            waiting = {k for k, _ in mirror.metas(LANE_META)} & set(keys)
            if not waiting:
                return None  # the running run took them all
            try:
                with run_lock(settings.state.path):
                    pass
            except errors.LockHeld:
                if clock() >= deadline:
                    raise errors.LockHeld(
                        f"another skuferry run holds the lock and did not take the "
                        f"{len(waiting)} key(s) within {wait_s:.0f} s (it may still be reading "
                        "its source); they stay queued for its urgent lane or the next run"
                    ) from None
                sleep(poll_s)
                continue
            # the other run ended: run them here (the lock is free; the run takes it)
            mirror.set_metas({LANE_META + key: None for key in keys})
            return run_here()
    finally:
        mirror.close()
