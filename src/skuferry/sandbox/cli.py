"""``skuferry sandbox``: serve the local CMS API from a shell until Ctrl-C or SIGTERM."""

from __future__ import annotations

import contextlib
import errno
import math
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

import click

from skuferry import files
from skuferry.errors import UsageError
from skuferry.sandbox.config import (
    DEFAULT_KEY,
    DEFAULT_WORKSPACE,
    UPDATE_CHOICES,
    SandboxConfig,
    Updates,
)
from skuferry.sandbox.faults import FAULT_KINDS, LIST_FAULT_KINDS, Faults
from skuferry.sandbox.limits import MODES, Mode, default_limits
from skuferry.sandbox.pims.standins import PORTS, SYSTEMS, stand_in, try_lines, try_workdir
from skuferry.sandbox.server import Sandbox

F = TypeVar("F", bound=Callable[..., Any])

_DEFAULTS = default_limits()
# click.Choice has checked the strings; these tables give them their precise types.
_UPDATES: dict[str, Updates] = {u: u for u in UPDATE_CHOICES}
_MODES: dict[str, Mode] = {m: m for m in MODES}


def _parse_keys(values: tuple[str, ...]) -> dict[str, str]:
    keys: dict[str, str] = {}
    for value in values or (DEFAULT_KEY,):
        key, _, workspace = value.partition("=")
        if not key:
            message = f"{value!r}: expected KEY or KEY=WORKSPACE"
            raise click.BadParameter(message, param_hint="--key")
        keys[key] = workspace or DEFAULT_WORKSPACE
    return keys


def _parse_faults(
    values: tuple[str, ...], *, slow_s: float, list_lag_s: float = 0.0, list_page: int = 0
) -> Faults:
    probabilities: dict[str, Any] = {}
    kinds = (*FAULT_KINDS, *LIST_FAULT_KINDS)
    for value in values:
        kind, _, p = value.partition("=")
        if kind not in kinds:
            raise click.BadParameter(
                f"{kind!r}: expected one of {', '.join(kinds)}", param_hint="--fault"
            )
        try:
            probabilities[kind] = float(p)
        except ValueError as exc:
            raise click.BadParameter(f"{value!r}: expected KIND=PROBABILITY") from exc
    try:
        return Faults(**probabilities, slow_s=slow_s, list_lag_s=list_lag_s, list_page=list_page)
    except UsageError as exc:
        raise click.BadParameter(str(exc), param_hint="--fault") from exc


def _rate(flag: str, tier: str, scope: str, text: str) -> Callable[[F], F]:
    """A rate option of the sandbox's limiter, defaulting to the spec's figure."""
    return click.option(
        flag,
        type=click.IntRange(min=1),
        default=getattr(_DEFAULTS[tier], scope),
        show_default=True,
        help=text,
    )


@click.command("sandbox")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8765, show_default=True, help="Port to bind (0: any free port).")
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default="window",
    show_default=True,
    help="Rate limiter: fixed 1-minute windows or token buckets.",
)
@_rate("--read-per-minute", "read", "per_key", "Reads per key.")
@_rate("--write-per-minute", "write", "per_key", "Writes per key.")
@_rate(
    "--workspace-read-per-minute",
    "read",
    "per_workspace",
    "Reads per workspace, all its keys together.",
)
@_rate(
    "--workspace-write-per-minute",
    "write",
    "per_workspace",
    "Writes per workspace, all its keys together.",
)
@click.option(
    "--burst",
    type=click.IntRange(min=1),
    default=None,
    help="Token bucket capacity below a minute's rate, like a gateway's burst "
    "(implies --mode bucket).",
)
@click.option(
    "--updates",
    type=click.Choice(UPDATE_CHOICES),
    default="patch",
    show_default=True,
    help="Which of PATCH and PUT /api/v1/products/:id are served.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="The strict reading of the spec, which lists neither PATCH nor PUT: both answer 405 "
    "(skuferry then reports changed products as drift).",
)
@click.option(
    "--latency",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds added to every response.",
)
@click.option(
    "--key",
    "keys",
    multiple=True,
    metavar="KEY[=WORKSPACE]",
    help=f"An accepted API key (repeatable; default {DEFAULT_KEY}={DEFAULT_WORKSPACE}).",
)
@click.option(
    "--fault",
    "faults",
    multiple=True,
    metavar="KIND=PROBABILITY",
    help=f"Inject a fault into product writes (repeatable): {', '.join(FAULT_KINDS)}; "
    f"or into the product list's pages: {', '.join(LIST_FAULT_KINDS)}.",
)
@click.option(
    "--list-lag",
    "list_lag_s",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds the product list lags behind writes (a search index, a read replica): a "
    "product shows on list pages this long after its create; a GET by id sees it at once.",
)
@click.option(
    "--list-page",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="The list faults hit this page number only (0: every page).",
)
@click.option(
    "--slow",
    "slow_s",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="Seconds a slow_after_commit answer waits.",
)
@click.option("--seed", default=0, show_default=True, help="Seed of the fault draws.")
@click.option(
    "--require",
    "required",
    multiple=True,
    metavar="FIELD",
    help="A field every product must carry, else 422 (repeatable; default sku and name; "
    "change it live with POST /_sandbox/required).",
)
@click.option(
    "--pim",
    type=click.Choice(SYSTEMS),
    default=None,
    help="Also serve a connector's stand-in (a local PIM, ERP or shop API with a generated "
    "catalog) and print the lines that sync its example from it.",
)
@click.option(
    "--pim-products",
    type=click.IntRange(min=1),
    default=250,
    show_default=True,
    help="How many products the stand-in serves.",
)
def sandbox_command(
    *,
    pim: str | None,
    pim_products: int,
    host: str,
    port: int,
    mode: str,
    read_per_minute: int,
    write_per_minute: int,
    workspace_read_per_minute: int,
    workspace_write_per_minute: int,
    burst: int | None,
    updates: str,
    strict: bool,
    latency: float,
    keys: tuple[str, ...],
    faults: tuple[str, ...],
    slow_s: float,
    list_lag_s: float,
    list_page: int,
    seed: int,
    required: tuple[str, ...],
) -> None:
    """Serve the local stand-in of the CMS API (admin under /_sandbox/) until stopped."""
    key_map = _parse_keys(keys)
    config = SandboxConfig(
        keys=key_map,
        key_limits={"read": read_per_minute, "write": write_per_minute},
        workspace_limits={"read": workspace_read_per_minute, "write": workspace_write_per_minute},
        mode=_MODES["bucket" if burst is not None else mode],
        burst=burst,
        updates=None if strict else _UPDATES[updates],
        faults=_parse_faults(faults, slow_s=slow_s, list_lag_s=list_lag_s, list_page=list_page),
        seed=seed,
        latency_s=latency,
        required_fields=required or ("sku", "name"),
        host=host,
        port=port,
    )
    stop = threading.Event()

    def _on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    sandbox = Sandbox(config)
    try:
        with contextlib.ExitStack() as stack:
            url = _started(sandbox, host, port)
            stack.callback(sandbox.stop)
            shape = f"mode bucket, burst {burst}" if burst is not None else f"mode {mode}"
            served = "PATCH/PUT: 405 (--strict)" if strict else f"updates: {updates}"
            click.echo(f"sandbox CMS API at {url}  ({shape}, {served}, admin {url}/_sandbox/stats)")
            for key, workspace in key_map.items():
                click.echo(f"  key {key} -> workspace {workspace}")
            if pim is not None:
                _serve_stand_in(
                    stack,
                    pim,
                    products=pim_products,
                    host=host,
                    api_url=url,
                    key=next(iter(key_map)),
                    writes_per_minute=min(write_per_minute, workspace_write_per_minute),
                )
            click.echo("Ctrl-C to stop")
            while not stop.wait(0.5):
                pass
    except OSError as exc:
        raise click.ClickException(f"cannot serve on {host}:{port}: {exc}") from exc
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    click.echo("sandbox stopped")


def _started(sandbox: Sandbox, host: str, port: int) -> str:
    """``sandbox`` started; a port in use is said with the flag that picks another."""
    try:
        return sandbox.start()
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise click.ClickException(
            f"cannot serve on {host}:{port}: the port is in use. Is another sandbox still "
            "running (the walkthrough's, in another terminal)? Stop it with Ctrl-C there, "
            f"or pick another port: --port {port + 1 if port else 8766}"
        ) from exc


def _serve_stand_in(
    stack: contextlib.ExitStack,
    name: str,
    *,
    products: int,
    host: str,
    api_url: str,
    key: str,
    writes_per_minute: int,
) -> None:
    """Start ``name``'s stand-in on its docs' port; print how to sync its example from it."""
    workdir = files.private_dir(try_workdir())
    try:
        standin = stand_in(name, products=products, host=host, port=None, workdir=workdir)
        stack.enter_context(standin.running())
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise click.ClickException(
            f"cannot serve the {name} stand-in on {host}:{PORTS.get(name, 0)} (the port its "
            f"docs name): the port is in use. Is another `skuferry sandbox --pim {name}` still "
            "running? Stop it with Ctrl-C in its terminal"
        ) from exc
    click.echo(
        f"{name} stand-in at {standin.server.url} ({len(standin.keys)} products); "
        "to sync its example, in another terminal, from the repository root:"
    )
    for line in try_lines(standin, api_url=api_url, api_key=key, workdir=workdir):
        click.echo(f"  {line}")
    pace = min(writes_per_minute, 60)  # skuferry's default [budget] write_per_minute is 60
    click.echo(
        f"It takes about {math.ceil(max(products - pace, 0) / pace) or 1} min: {products} "
        f"products at {pace} writes a minute (the first minute's go at once). Faster: start "
        "this with --write-per-minute 600 --workspace-write-per-minute 600, and export "
        "SKUFERRY_BUDGET__WRITE_PER_MINUTE=600 before the sync."
    )
