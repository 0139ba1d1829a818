"""``skuferry accept-shape``: the source's shape now becomes the contract, on purpose.

After a run refused a change of shape (a column renamed and the mapping changed with it,
a column dropped for good, keys reformatted in the ERP), this reads the source once and
keeps what it shows (``sync.accept``); the next ``sync`` is held to it. Nothing is sent
to the CMS. ``sync --accept-shape`` does the same, then the run.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from skuferry import errors


def accept_shape(config_path: Path | None, *, as_json: bool) -> int:
    """Accept the shape of the source ``config_path`` names; print what changed."""
    from skuferry.config.load import load_settings
    from skuferry.sync.accept import accept_shape as accept

    settings = load_settings(config_path)
    accepted = accept(settings)
    if as_json:
        data = {
            "source": accepted.source,
            "accepted": accepted.shape is not None,
            "changes": [
                {"field": c.target, "change": c.text, "breaking": c.breaking}
                for c in accepted.verdict.changes
            ],
            "gone": sorted(accepted.shape.gone()) if accepted.shape is not None else [],
            "renamed": [[old, new] for old, new in accepted.renamed],
        }
        click.echo(json.dumps(data, ensure_ascii=False))
    else:
        for line in accepted.lines():
            click.echo(line)
    return errors.EXIT_OK
