"""``skuferry explain KEY``: one product's story (``service.story``)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from skuferry import canonical, errors


def explain(config_path: Path | None, key: str, *, as_json: bool) -> int:
    """Tell ``key``'s story; exit 1 for a key neither the source nor the state holds."""
    from skuferry.config.load import load_settings
    from skuferry.service import story

    settings = load_settings(config_path)
    found = story.tell(settings, key)
    if as_json:
        click.echo(canonical.dumps(found.as_json()))  # decimals as the source gave them
    else:
        story.print_story(found, sys.stdout)
    return errors.EXIT_OK if found.known else errors.EXIT_PARTIAL
