"""`skuferry demo`: the embedded default, end to end on this machine.

Starts the sandbox API on a free loopback port, writes a config and a state
file in a temporary folder, syncs the shipped sample catalog (with its broken
rows), then plays a week in the shop: staff rewrite a description in the CMS,
the ERP changes a few prices, drops a product and fixes the row that had no
item number (a row without a readable key holds every gone decision: it could
be any product). The second sync sends only
the prices (the description is create-only: the CMS's now) and archives the
dropped product; the demo shows what the server received, then says what to
do next.
"""

from __future__ import annotations

import csv
import shutil
import sys
import tempfile
from contextlib import ExitStack
from importlib import resources
from pathlib import Path

from rich.console import Console

from skuferry import canonical
from skuferry.config.load import load_settings
from skuferry.config.schema import Settings
from skuferry.files import create_private
from skuferry.models import RunSummary
from skuferry.service import report
from skuferry.sync import engine

DEMO_KEY = "demo-key"
DEMO_WRITE_PER_MINUTE = (
    1200  # the spec's write tier is 60/min per key; raised so the demo takes seconds
)
CHANGED = 5
STAFF_TEXT = "Rewritten by the shop's editor: balanced head, lifetime warranty"


def catalog_path() -> Path:
    """The shipped sample catalog (also at examples/catalog.csv in a checkout)."""
    return Path(str(resources.files("skuferry") / "demo_data" / "catalog.csv"))


CONFIG = """\
# Written by `skuferry demo`; a real config is config.example.toml in the repository.
[api]
base_url = "{url}"
api_key = "{key}"
timeout_s = 10
update_method = "patch"

[source]
type = "csv"
path = "catalog.csv"

[mapping]
key = "sku"
[mapping.fields]
sku = "SKU"
name = "Name"
description = {{ column = "Description", create_only = true }}  # the CMS's after creation
price = {{ column = "Price", type = "decimal" }}
currency = "Currency"
stock = {{ column = "Stock", type = "integer" }}
ean = "EAN"
category = "Category"

[budget]
read_per_minute = {reads}
write_per_minute = {writes}

[gone]  # a product the ERP drops is archived on the remote, once
action = "patch"
patch = {{ status = "archived", stock = 0 }}
restore = {{ status = "active" }}

[state]
path = "skuferry.db"
"""


def run_demo(
    *, keep: bool = False, workdir: Path | None = None, console: Console | None = None
) -> int:
    out = console or Console(highlight=False, soft_wrap=True)
    with ExitStack() as stack:
        # Without --workdir the folder is temporary: removed when the demo ends (after
        # Ctrl-C with --keep), so demo runs leave nothing behind in /tmp.
        folder = workdir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="skuferry-demo-"))
        )
        return _demo(out, folder, keep=keep, temporary=workdir is None)


def _demo(out: Console, folder: Path, *, keep: bool, temporary: bool) -> int:
    from skuferry.sandbox import Sandbox, SandboxConfig

    create_private(folder / "catalog.csv")  # catalog data is private, like the state file
    shutil.copyfile(catalog_path(), folder / "catalog.csv")
    config = SandboxConfig(
        keys={DEMO_KEY: "demo"},
        key_limits={"read": 1800, "write": DEMO_WRITE_PER_MINUTE},
        workspace_limits={"read": 3600, "write": DEMO_WRITE_PER_MINUTE * 2},
        updates="both",
    )
    with Sandbox(config) as sandbox:
        out.print(f"[bold]skuferry demo[/bold]: sandbox CMS API at {sandbox.url}")
        out.print(
            f"  its write limit is raised to {DEMO_WRITE_PER_MINUTE}/min for the demo "
            "(the real API allows 60/min per key), so this takes seconds"
        )
        where = " (temporary: --workdir DIR keeps them)" if temporary else ""
        out.print(f"  state and config in {folder}{where}\n")
        config_file = folder / "skuferry.toml"
        config_file.touch(mode=0o600)  # it holds the (demo) key: as a real config should be
        config_file.chmod(0o600)
        config_file.write_text(
            CONFIG.format(url=sandbox.url, key=DEMO_KEY, reads=1800, writes=DEMO_WRITE_PER_MINUTE)
        )
        settings = load_settings(config_file, env={})

        out.print("[bold]1. first sync[/bold] of examples/catalog.csv (with a few broken rows):")
        first = _sync(settings)
        report.print_summary(first, stream=out.file)

        changed = _change_prices(folder / "catalog.csv", CHANGED)
        ids = {str(p.get("sku")): str(p["id"]) for p in sandbox.products("demo")}
        edited = changed[0]
        sandbox.edit_product(ids[edited], {"description": STAFF_TEXT}, workspace="demo")
        dropped = next(k for k in reversed(ids) if k not in changed)
        _drop(folder / "catalog.csv", dropped)
        out.print(
            f"\n[bold]2. a week in the shop[/bold]: staff rewrote the description of {edited} "
            f"in the CMS; the ERP changed the price of {len(changed)} products "
            f"({', '.join(changed)}), dropped {dropped} and no longer exports the row without "
            "an item number (while it was there, nothing could be archived). Synced again:"
        )
        second = _sync(settings)
        report.print_summary(second, stream=out.file)
        names = {v: k for k, v in ids.items()}
        received = sandbox.updates_received("demo")
        out.print(f"\nwhat the sandbox received ({len(received)} updates, only what changed):")
        for update in received:
            body = canonical.dumps(update["body"])
            out.print(
                f"  {update['method']} {names.get(update['id'], update['id'])} {body}", markup=False
            )

        stats = sandbox.stats()
        products = sandbox.products("demo")
        kept = next(p for p in products if p.get("sku") == edited)["description"] == STAFF_TEXT
        keys = [p.get("sku") for p in products]
        dupes = len(keys) - len(set(keys))
        out.print(
            f"the staff's description of {edited} "
            f"{'survived the sync' if kept else 'was OVERWRITTEN'} (create_only = true)."
        )
        out.print(
            f"\nthe sandbox now holds {len(products)} products, {dupes} duplicate keys; "
            f"it answered {sum(stats.rate_limited.values())} rate-limit refusals (429)."
        )
        ok = (
            dupes == 0
            and kept
            and (second.updated, second.archived, second.created) == (len(changed), 1, 0)
        )
        cmd, hint = command_name()
        out.print(
            "\nnext: put your workspace's key in SKUFERRY_API_KEY (or a file), then, with "
            "your own export:\n"
            f"  {cmd} init --from export.csv --base-url https://cms.example.com -o my.toml\n"
            "      # proposes [source] and [mapping] from the export, shows it at work, writes "
            "my.toml\n"
            f"  {cmd} check --config my.toml    # config, source, one authenticated read\n"
            f"  {cmd} plan  --config my.toml    # what would change, with an ETA\n"
            f"  {cmd} sync  --config my.toml    # do it",
            markup=False,
        )
        if hint:
            out.print(hint, markup=False)
        if keep:
            out.print(
                f"\nsandbox still serving at {sandbox.url} (key {DEMO_KEY}, workspace demo); "
                f"try:\n  {cmd} status --config {folder / 'skuferry.toml'}\n"
                f"  curl -s '{sandbox.url}/_sandbox/updates?workspace=demo'\n"
                "Ctrl-C to stop",
                markup=False,
            )
            _wait_forever()
    return 0 if ok else 1


def command_name() -> tuple[str, str | None]:
    """How to type ``skuferry`` in this shell, and a hint when it is not on the PATH.

    The checkout's demo runs from ``.venv``, whose ``bin`` is rarely on the PATH:
    the demo then names the script by its path instead of printing a command that
    the shell cannot find.
    """
    script = Path(sys.executable).parent / "skuferry"
    found = shutil.which("skuferry")
    if found is not None and (not script.exists() or Path(found).resolve() == script.resolve()):
        return "skuferry", None
    if not script.exists():
        return f"{Path(sys.executable).name} -m skuferry", None
    shown = str(script)  # absolute: the demo runs from the checkout, not the shell's cwd
    hint = (
        f"(skuferry is not on your PATH: use {shown}, or `python3 dev.py skuferry ...` in a "
        f'checkout, or put it there: export PATH="{script.parent}:$PATH" or pipx install .)'
    )
    return shown, hint


def _sync(settings: Settings) -> RunSummary:
    with report.progress(enabled=True) as on_progress:
        return engine.run_once(settings, on_progress=on_progress)


def _change_prices(path: Path, count: int) -> list[str]:
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    changed: list[str] = []
    for row in rows[3::40]:
        if len(changed) == count:
            break
        try:
            row["Price"] = f"{float(row['Price']) + 1:.2f}"
        except ValueError:
            continue
        changed.append(row["SKU"])
    _write_rows(path, rows)
    return changed


def _drop(path: Path, key: str) -> None:
    """Remove one product's row, as an ERP export does for a discontinued product.

    The row without an item number goes too: while a row's key cannot be read, a
    full pull decides nothing gone (it could be the dropped product), so the demo's
    second export is the one where the ERP fixed it.
    """
    with path.open(newline="", encoding="utf-8") as f:
        rows = [row for row in csv.DictReader(f) if row["SKU"] not in (key, "")]
    _write_rows(path, rows)


def _write_rows(path: Path, rows: list[dict[str, str]]) -> None:
    tmp = path.with_suffix(".tmp")
    create_private(tmp)  # replaced in place, as an ERP does; private like the original
    with tmp.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)


def _wait_forever() -> None:
    import threading

    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        return
