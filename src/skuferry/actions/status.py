"""``skuferry status``: what the mirror knows, as a table or one JSON object."""

from __future__ import annotations

import json
from pathlib import Path

import click

from skuferry import errors


def status(config_path: Path | None, *, as_json: bool, limit: int) -> int:
    """Counts per state, last runs, rejected products, open intents; changes nothing."""
    from skuferry.config.load import load_settings
    from skuferry.service import report

    settings = load_settings(config_path)
    data = report.collect_status(settings, limit=limit)
    if as_json:
        click.echo(json.dumps(data, ensure_ascii=False, default=str))
    else:
        report.print_status(data)
    return errors.EXIT_OK
