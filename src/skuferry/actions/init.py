"""``skuferry init``: propose a config from the export or API the user has, show it at
work, and write it (``0600``, never over an existing file without ``--force``).

The work is ``skuferry.discover``'s; this verb reads the sample, asks on a terminal
(unless ``--yes``), writes, and says the next commands.
"""

from __future__ import annotations

import shlex
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from skuferry import errors, files

if TYPE_CHECKING:  # the discovery loads when the verb runs
    from skuferry.discover.model import Proposal, Sample


def init(
    *,
    origin: str,
    preset: str | None,
    base_url: str | None,
    output: Path,
    yes: bool,
    force: bool,
    interactive: bool,
    command: str,
    source: Sequence[str] = (),
) -> int:
    """Propose, show, ask (``interactive`` and not ``yes``), write; the exit code.

    ``source``: ``KEY=VALUE`` keys a remote file is read with (``--source``), given to
    the loader as ``SKUFERRY_SOURCE__<KEY>`` is.
    """
    from skuferry.discover import read

    if output.exists() and not force:
        raise errors.UsageError(f"{output} exists: pass --force to replace it (nothing written)")
    if not output.parent.absolute().is_dir():
        raise errors.UsageError(f"--output {output}: no folder {output.parent}")
    env = {**read.environment(), **_source_keys(source)}
    asking = interactive and not yes
    given = _preset_keys(preset, origin, env) if asking and preset else None
    folder = output.parent.absolute()
    with tempfile.TemporaryDirectory(prefix="skuferry-init-") as scratch:  # 0700
        sample = read.sample(
            origin, folder=folder, env=env, preset=preset, given=given, scratch=Path(scratch)
        )
        return _propose(sample, origin, output=output, base_url=base_url, command=command,
                        env=env, preset=preset, asking=asking, yes=yes, force=force)  # fmt: skip


def _propose(
    sample: Sample,
    origin: str,
    *,
    output: Path,
    base_url: str | None,
    command: str,
    env: Mapping[str, str],
    preset: str | None,
    asking: bool,
    yes: bool,
    force: bool,
) -> int:
    from skuferry.discover.draft import Draft
    from skuferry.discover.propose import propose
    from skuferry.discover.session import ClickTerminal, converse

    proposal = propose(sample, preset=preset)
    if proposal.key is None:
        raise errors.UsageError(
            f"no key could be proposed for {origin}: {'; '.join(proposal.notes)}"
        )
    draft = Draft(sample, output, base_url, command, env)

    def show(chosen: Proposal) -> None:
        click.echo("\n".join(draft.show(chosen)))

    if asking:
        chosen = converse(proposal, show, ClickTerminal())
        if chosen is None:
            click.echo("nothing written")
            return errors.EXIT_OK
        _write(output, draft.text(chosen), force=force)
    else:
        if not yes:
            click.echo("no terminal to ask: the proposal is taken as it is (as --yes)", err=True)
        _write(output, draft.text(proposal), force=force)
        show(proposal)
    _next(output, base_url=base_url, env=env)
    return errors.EXIT_OK


def _source_keys(pairs: Sequence[str]) -> dict[str, str]:
    """``--source KEY=VALUE`` as the environment gives [source] keys to the loader."""
    from skuferry.discover.read import CONNECTION_KEYS, PATH_KEYS

    keys = [k for k in CONNECTION_KEYS if k != "headers"]
    found: dict[str, str] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        key = key.strip().lower()
        if key == "headers":
            raise errors.UsageError(
                "--source headers: give headers in SKUFERRY_SOURCE__HEADERS (JSON), not on "
                "the command line, where every user of the machine can read them"
            )
        if not equals or key not in keys:
            raise errors.UsageError(f"--source {pair}: KEY=VALUE, KEY one of {', '.join(keys)}")
        if key in PATH_KEYS:  # a path on the command line is the working directory's
            value = str(Path(value).expanduser().absolute())
        found[f"SKUFERRY_SOURCE__{key.upper()}"] = value
    return found


def _preset_keys(preset: str, origin: str, env: Mapping[str, str]) -> dict[str, object]:
    """A preset's identifiers the environment does not give (a client id, a user name)."""
    from skuferry.discover.read import missing_preset_keys, preset_table

    table = preset_table(preset, origin, env=env, given=None)
    given: dict[str, object] = {}
    for key in missing_preset_keys(preset, table):
        if key == "headers":
            given[key] = {"X-Odoo-Database": click.prompt("The Odoo database (X-Odoo-Database)")}
        else:
            given[key] = click.prompt(f"The {preset} {key.replace('_', ' ')}")
    return given


def _write(output: Path, text: str, *, force: bool) -> None:
    try:
        files.write_private(output, text, overwrite=force)
    except FileExistsError:
        raise errors.UsageError(f"{output} exists: pass --force to replace it") from None
    click.echo(f"wrote {output} (mode 0600)")


def _next(output: Path, *, base_url: str | None, env: Mapping[str, str]) -> None:
    config = shlex.quote(str(output))
    click.echo("")
    click.echo("Next:")
    if not base_url:
        click.echo("  skuferry sandbox        # in another terminal: the local stand-in CMS")
    if not env.get("SKUFERRY_API_KEY", "").strip():
        click.echo(f"  export SKUFERRY_API_KEY={'sandbox-key' if not base_url else '...'}")
    click.echo(f"  skuferry check --config {config}")
    click.echo(f"  skuferry sync --config {config}")
