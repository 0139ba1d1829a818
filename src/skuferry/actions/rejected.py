"""``skuferry rejected``: the products the last runs left refused or failed (the dead
letters), as text, one JSON array, or a CSV file for the data team (0600: catalog data)."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import click

from skuferry import errors, files
from skuferry.config.schema import Settings
from skuferry.state.deadletters import DeadLetter
from skuferry.state.mirror import Mirror

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


def rejected(config_path: Path | None, *, as_json: bool, csv_path: Path | None) -> int:
    """List the dead letters (to ``csv_path`` when given); changes nothing on the CMS."""
    from skuferry.config.load import load_settings

    settings = load_settings(config_path)
    letters = dead_letters(settings)
    if csv_path is not None:
        write_csv(letters, csv_path)
        click.echo(f"{len(letters)} rejected or failed product(s) written to {csv_path}")
    elif as_json:
        click.echo(letters_json(letters))
    else:
        print_letters(letters, sys.stdout)
    return errors.EXIT_OK


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
