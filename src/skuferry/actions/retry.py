"""``skuferry retry``: send rejected or failed products again, without a source change.

A named run of those keys with their refusals forgotten (the planner's ``resend``):
sent again by the normal rules (check-then-create, budgets, field ownership), then
each key's outcome read back from the mirror.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import click

from skuferry import errors
from skuferry.actions.one_run import one_run
from skuferry.actions.rejected import dead_letters
from skuferry.config.schema import Settings
from skuferry.models import MirrorRow, RunOptions, RunSummary, State
from skuferry.state.deadletters import DeadLetter
from skuferry.state.mirror import Mirror


def retry(config_path: Path | None, keys: Sequence[str], *, every: bool, as_json: bool) -> int:
    """Run the keys named (or, with ``every``, every dead letter's) and say what became
    of each; the run's exit code."""
    from skuferry.config.load import load_settings
    from skuferry.sync.read.named import unique

    settings = load_settings(config_path)
    if not keys and not every:
        raise errors.UsageError("name the keys to retry, or pass --all")
    wanted = unique(retry_keys(settings, keys, every=every))
    if not wanted:
        click.echo("nothing to retry: no rejected or failed products")
        return errors.EXIT_OK
    before = rows(settings, wanted)
    options = RunOptions(only=tuple(wanted), resend=frozenset(wanted))
    summary = one_run(settings, options, quiet=as_json, watched=True)
    found = outcomes(
        wanted,
        before,
        rows(settings, wanted),
        dead_letters(settings, wanted),
        summary,
    )
    if as_json:
        data = {**summary.as_json(), "keys": [o.as_json() for o in found]}
        click.echo(json.dumps(data, ensure_ascii=False))
    else:
        click.echo(f"retried {len(found)} product(s):")
        print_outcomes(found, sys.stdout)
    return summary.exit_code


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
