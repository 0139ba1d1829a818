"""``skuferry init``: propose a config from the export or API the user has, show it at
work, and write it (``0600``, never over an existing file without ``--force``).

The work is ``skuferry.discover``'s; this verb reads the sample, asks on a terminal
(unless ``--yes``), writes, and shows the preview and the next command.
"""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

import click

from skuferry import errors, files

SANDBOX_KEY_HINT = "sandbox-key"


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
) -> int:
    """Propose, show, ask (``interactive`` and not ``yes``), write; the exit code."""
    from skuferry.discover import read
    from skuferry.discover.propose import propose
    from skuferry.discover.session import ClickTerminal, converse

    if output.exists() and not force:
        raise errors.UsageError(
            f"{output} exists: pass --force to replace it (nothing was written)"
        )
    folder = output.parent.absolute()
    env = read.environment()
    asking = interactive and not yes
    given = _ask_preset_keys(preset, origin, env) if asking and preset else None
    sample = read.sample(origin, folder=folder, env=env, preset=preset, given=given)
    proposal = propose(sample, preset=preset)
    if proposal.key is None:
        notes = "; ".join(proposal.notes)
        raise errors.UsageError(f"no key could be proposed for {origin} ({notes})")
    state = f"{output.stem}.db"
    how_much = (
        f"It read {len(sample.records):,} records, the whole source, through the "
        f"{sample.kind} source."
        if sample.complete
        else f"It read the first {len(sample.records):,} records through the "
        f"{sample.kind} source (the sync reads them all)."
    )

    def text_of(chosen: object) -> str:
        from skuferry.discover.render import render

        return render(
            chosen,  # type: ignore[arg-type]
            base_url=base_url,
            state_path=state,
            origin=sample.origin,
            read=how_much,
            command=command,
        )

    def show(chosen: object) -> None:
        from skuferry.discover.render import summary

        click.echo("\n".join(summary(chosen)))  # type: ignore[arg-type]
        _preview(
            text_of(chosen),
            folder=folder,
            env=env,
            output=output,
            sample_size=len(sample.records),
            whole=sample.complete,
            base_url=base_url,
        )

    if asking:
        chosen = converse(proposal, show, ClickTerminal())
        if chosen is None:
            click.echo("nothing written")
            return errors.EXIT_OK
        _write(output, text_of(chosen), force=force)
    else:
        _write(output, text_of(proposal), force=force)
        show(proposal)
    _next(output, base_url=base_url, env=env)
    return errors.EXIT_OK


def _ask_preset_keys(preset: str, origin: str, env: dict[str, str]) -> dict[str, object]:
    """A preset's identifiers the environment does not give (a client id, a user name)."""
    from skuferry.discover.read import missing_preset_keys, preset_table

    table = preset_table(preset, origin, env=env, given=None)
    given: dict[str, object] = {}
    for key in missing_preset_keys(preset, table):
        if key == "headers":
            database = click.prompt("The Odoo database (X-Odoo-Database)")
            given[key] = {"X-Odoo-Database": database}
        else:
            given[key] = click.prompt(f"The {preset} {key.replace('_', ' ')}")
    return given


def _preview(
    text: str,
    *,
    folder: Path,
    env: dict[str, str],
    output: Path,
    sample_size: int,
    whole: bool,
    base_url: str | None,
) -> None:
    from skuferry.discover import read
    from skuferry.discover.preview import lines, preview

    settings = read.load(tomllib.loads(text), folder=folder, env=env, origin=str(output))
    ask_cms = bool(base_url) and bool(env.get("SKUFERRY_API_KEY", "").strip())
    shown = preview(settings, limit=max(sample_size, 1), cms=ask_cms)
    click.echo("\n".join(lines(shown, whole_known=whole)))


def _write(output: Path, text: str, *, force: bool) -> None:
    try:
        files.write_private(output, text, overwrite=force)
    except FileExistsError:
        raise errors.UsageError(
            f"{output} exists: pass --force to replace it (nothing was written)"
        ) from None
    click.echo(f"wrote {output} (mode 0600)")


def _next(output: Path, *, base_url: str | None, env: dict[str, str]) -> None:
    config = shlex.quote(str(output))
    click.echo("")
    click.echo("Next:")
    if not base_url:
        click.echo("  skuferry sandbox        # in another terminal: the local stand-in CMS")
    if not env.get("SKUFERRY_API_KEY", "").strip():
        key = SANDBOX_KEY_HINT if not base_url else "..."
        click.echo(f"  export SKUFERRY_API_KEY={key}")
    click.echo(f"  skuferry check --config {config}")
    click.echo(f"  skuferry sync --config {config}")
