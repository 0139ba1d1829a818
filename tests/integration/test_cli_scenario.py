"""One operator's morning through the CLI, pinned byte for byte against a golden transcript.

A structural change (issue 30) must keep every behaviour: command, exit code, stdout,
log event and field, and what reaches the CMS. This scenario drives only the public CLI
(``python -m skuferry ...`` as subprocesses, the sandbox CMS on loopback) through a German
ERP export with a bad row, a product the CMS refuses (422), a product that leaves the
export and is archived by ``[gone]``, ``plan``, ``sync --verify`` after a staff edit on the
CMS, ``status --json``, ``sync --only``, ``rejected``, ``retry`` once the CMS is fixed, and
an unchanged ``sync`` that the quick lane takes. Each step's command line, exit code,
stdout and stderr (JSON logs, as cron sees them) and the CMS's products at the end are
written out, with only what differs from run to run normalised (times, durations, temp
paths, the port, the version).

The golden transcript (``GOLDEN``) was written by the code before the move (3d80607).
To compare any tree with it, or to write a transcript of a tree::

    PYTHONPATH=<tree>/src python -m tests.integration.test_cli_scenario --diff
    PYTHONPATH=<tree>/src python -m tests.integration.test_cli_scenario --write OUT.txt
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import structlog

from skuferry.sandbox import Sandbox, SandboxConfig

pytestmark = pytest.mark.integration

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "cli-scenario.txt"
KEY = "sk-scenario-Hq4wN8tB"  # distinctive: a leak into any output shows in the transcript
WORKSPACE = "default"
FAST = 6000  # per minute: no step waits on a rate budget, so no step's output depends on it
# A file younger than the source's racy window (2 s) is always read in full, whatever its
# stat says; waiting it out after each edit makes the quick lane's choice independent of
# how fast this machine is.
SETTLE_S = 2.2

HEADER = ["Artikelnummer", "Bezeichnung", "Beschreibung", "VK-Preis", "Bestand", "EAN"]
# A German ERP export: ';', UTF-8 with a BOM, CRLF, decimal commas with thousands dots,
# EANs and keys with leading zeros (text), a quoted description holding HTML, the
# delimiter and a line break.
ROWS: list[list[str]] = [
    [
        "079685",
        "Akku-Bohrschrauber 18 V",
        "<p>Zwei Gänge; LED-Licht</p>\nInkl. 2 Akkus",
        "1.234,50",
        "12",
        "04596710520787",
    ],
    ["079686", "Schlagbohrmaschine 750 W", "Metallgehäuse", "89,90", "7", "04596710520794"],
    ["100200", "Schraubendreher-Satz 6-tlg.", "", "19,90", "140", "4006381333931"],
    ["100201", "Winkelschleifer 125 mm", 'Scheibe "Inox"; 11.000 U/min', "64,95", "0", ""],
    ["100202", "Wasserwaage 60 cm", "", "24,95", "31", "4003773012345"],
    ["100203", "Maßband 5 m", "", "7,49", "250", "4003773054321"],
    # the bad row: a price written with a point; the mapping refuses it, naming it
    ["100204", "Cuttermesser 18 mm", "", "12.50", "60", ""],
    # no name: the CMS requires one and answers 422
    ["100205", "", "Ersatzklingen, 10 Stück", "4,20", "500", ""],
    # leaves the export in step 2 and is archived
    ["100206", "Heißklebepistole", "Auslaufartikel", "15,00", "3", ""],
]

CONFIG = """\
[api]
base_url = "{url}"
api_key = "{key}"
timeout_s = 10
update_method = "patch"
max_in_flight = 1  # one write at a time: the order of events and of the CMS's ids is fixed

[source]
type = "csv"
path = "export/artikel.csv"
delimiter = ";"

[mapping]
key = "sku"
[mapping.fields]
sku = "Artikelnummer"
name = "Bezeichnung"
description = "Beschreibung"
price = {{ column = "VK-Preis", type = "decimal", decimal = ",", thousands = "." }}
stock = {{ column = "Bestand", type = "integer", thousands = ".", default = 0 }}
ean = "EAN"

[gone]
action = "patch"
patch = {{ status = "archived", stock = 0 }}
restore = {{ status = "active" }}

[budget]
read_per_minute = {fast}
write_per_minute = {fast}

[state]
path = "state/skuferry.db"
"""


def write_catalog(path: Path, rows: Sequence[Sequence[str]]) -> None:
    """The export as the ERP writes it, then aged past the racy window (see SETTLE_S)."""

    def cell(value: str) -> str:
        if any(c in value for c in ';"\n'):
            return '"' + value.replace('"', '""') + '"'
        return value

    lines = [";".join(cell(v) for v in row) for row in [HEADER, *rows]]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(("\ufeff" + "\r\n".join(lines) + "\r\n").encode("utf-8"))
    time.sleep(SETTLE_S)


# -- normalising ----------------------------------------------------------------------------

_ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?")
# a row of ``status``'s "last runs" table (id, started, ...): its last cell is the run's
# duration in seconds
_RUN_ROW = re.compile(r"^(\s*\d+\s+<time>\s.*\s)\d+(?:\.\d+)?$")
# the human summary's "duration   0.4 s"
_DURATION = re.compile(r"^(duration\s+)\d+(?:\.\d+)? s$")
_VERSION = re.compile(r"^(skuferry, version ).+$", re.MULTILINE)
_EPOCH = 1e9  # a JSON number this large is a wall-clock time (seconds since 1970)


def normalise(text: str, *, workdir: Path, port: int) -> str:
    """What differs between two runs of the same scenario, and nothing else, made constant.

    - the temporary folder (also as the OS resolves it) -> ``<tmp>``;
    - the sandbox's port -> ``<port>``; the version ``--version`` prints -> ``<version>``;
    - wall-clock times: ISO 8601 (logs, ``status``, ``rejected``) -> ``<time>``, and in
      JSON any number of at least 1e9 (``started_at``, ``at``, ...) -> ``"<epoch>"``;
    - durations, which measure this machine and not skuferry: ``duration_s`` in JSON -> 0,
      the human summary's ``duration`` and ``status``'s per-run seconds -> ``<s>``;
    - the log's ``timestamp`` field is dropped;
    - trailing spaces of human lines (a table pads its cells to the widest, and the widest
      may be a duration).

    Counts, keys, ids the CMS gave, messages, event names, field names (and the
    ``logger`` field's value) and exit codes are left as they are: they are what the
    scenario pins.
    """
    for folder in {str(workdir), str(workdir.resolve())}:
        text = text.replace(folder, "<tmp>")
    text = text.replace(f":{port}", ":<port>")
    text = _VERSION.sub(r"\g<1><version>", text)
    lines = []
    for line in text.split("\n"):
        if line.startswith(("{", "[")):
            lines.append(_ISO_TIME.sub("<time>", _normalise_json(line)))
            continue
        human = _ISO_TIME.sub("<time>", line.rstrip())
        human = _RUN_ROW.sub(r"\g<1><s>", human)
        lines.append(_DURATION.sub(r"\g<1><s> s", human))
    return "\n".join(lines)


class _Number:
    """A JSON fraction kept as written (``19.90`` stays ``19.90``, never ``19.9``)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _dumps(value: Any, *, sort_keys: bool = False) -> str:
    """JSON text of ``value``; a ``_Number`` or ``Decimal`` is written as the bare number."""

    def raw(number: Any) -> str:
        return f"<N{number.text if isinstance(number, _Number) else number}N>"

    text = json.dumps(value, ensure_ascii=False, sort_keys=sort_keys, default=raw)
    return re.sub(r'"<N(-?[0-9.eE+-]+)N>"', r"\1", text)


def _normalise_json(line: str) -> str:
    try:
        data = json.loads(line, parse_float=_Number)
    except ValueError:
        return line  # not JSON after all: left to the text rules

    def walk(value: Any, name: str = "") -> Any:
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items() if k != "timestamp"}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if name == "duration_s" and value is not None:
            return 0
        number = float(value.text) if isinstance(value, _Number) else value
        if isinstance(number, int | float) and not isinstance(number, bool) and number >= _EPOCH:
            return "<epoch>"
        return value

    return _dumps(walk(data))


# -- the scenario ---------------------------------------------------------------------------


class Scenario:
    """The sandbox, a work folder and the transcript of every CLI step run in it."""

    def __init__(self, workdir: Path, sandbox: Sandbox) -> None:
        self.workdir = workdir
        self.sandbox = sandbox
        self.catalog = workdir / "export" / "artikel.csv"
        self.config = workdir / "skuferry.toml"
        self.transcript: list[str] = []

    def run(self, title: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SKUFERRY_")}
        for name in ("CREDENTIALS_DIRECTORY", "STATE_DIRECTORY"):
            env.pop(name, None)
        env["PYTHONUNBUFFERED"] = "1"
        # tables are laid out to the console's width; a wide one keeps a long duration
        # from re-wrapping ``status``'s table around the cells the scenario pins
        env["COLUMNS"] = "200"
        result = subprocess.run(
            [sys.executable, "-m", "skuferry", *args],
            cwd=self.workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        self.transcript += [
            f"=== {title}",
            "$ skuferry " + " ".join(args),
            f"exit {result.returncode}",
            "--- stdout",
            result.stdout.rstrip("\n"),
            "--- stderr",
            result.stderr.rstrip("\n"),
            "",
        ]
        return result

    def note(self, text: str) -> None:
        self.transcript += [f"# {text}", ""]


def _product_line(product: dict[str, Any]) -> str:
    """One stored product as JSON, keys sorted; a decimal as the bare number the CMS got
    (``19.90``: a string ``"19.90"`` would be a different payload)."""
    return _dumps(product, sort_keys=True)


def _taken(result: subprocess.CompletedProcess[str]) -> bool:
    """Whether the quick lane took the run: its own debug event says so."""
    for line in result.stderr.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == "sync.quick" and event.get("taken"):
                return True
    return False


def play(workdir: Path) -> str:
    """Run the whole scenario in ``workdir`` (empty) and return its normalised transcript."""
    config = SandboxConfig(
        keys={KEY: WORKSPACE},
        key_limits={"read": FAST, "write": FAST},
        workspace_limits={"read": FAST, "write": FAST},
        updates="patch",
        required_fields=("sku", "name"),
    )
    with Sandbox(config) as sandbox:
        s = Scenario(workdir, sandbox)
        s.config.write_text(CONFIG.format(url=sandbox.url, key=KEY, fast=FAST), encoding="utf-8")
        s.config.chmod(0o600)
        c = str(s.config)
        rows = [list(r) for r in ROWS]
        write_catalog(s.catalog, rows)

        s.run("version", "--version")
        s.run("first sync: a bad row, a 422", "sync", "--config", c)

        s.note("the export drops 100206 and reprices 100202; staff rename 100203 on the CMS")
        rows = [r for r in rows if r[0] != "100206"]
        next(r for r in rows if r[0] == "100202")[3] = "26,50"
        write_catalog(s.catalog, rows)
        edited = next(p for p in sandbox.products(WORKSPACE) if p["sku"] == "100203")
        sandbox.edit_product(edited["id"], {"name": "Massband (edited on the CMS)"}, WORKSPACE)

        s.run("plan", "plan", "--config", c)
        s.run("plan, as JSON", "plan", "--config", c, "--json")
        s.run("sync --verify: update, archive, repair", "sync", "--config", c, "--verify", "--json")
        s.run("status --json", "status", "--config", c, "--json")

        s.note("the export changes 100201 and 100203; only 100203 is synced now")
        next(r for r in rows if r[0] == "100201")[4] = "5"
        next(r for r in rows if r[0] == "100203")[3] = "7,99"
        write_catalog(s.catalog, rows)
        s.run("sync --only 100203", "sync", "--config", c, "--only", "100203", "--json")

        s.run("rejected", "rejected", "--config", c)
        s.run("rejected --json", "rejected", "--config", c, "--json")

        s.note("the CMS no longer requires a name")
        sandbox.config.required_fields = ("sku",)
        s.run("retry --all", "retry", "--config", c, "--all")
        s.run("sync: the rest of the change", "sync", "--config", c, "--json")
        quick = s.run("sync, unchanged: the quick lane", "-vv", "sync", "--config", c, "--json")
        assert _taken(quick), f"the quick lane did not take the unchanged run:\n{quick.stderr}"
        s.run("status", "status", "--config", c)

        products = sorted(sandbox.products(WORKSPACE), key=lambda p: (str(p.get("sku")), p["id"]))
        s.transcript.append("=== the CMS's products at the end")
        s.transcript += [_product_line(p) for p in products]
        port = int(sandbox.url.rsplit(":", 1)[1].split("/")[0])

    return normalise("\n".join(s.transcript) + "\n", workdir=workdir, port=port)


def changes(got: str) -> str:
    """The unified diff from the golden transcript to ``got`` (empty when they agree)."""
    want = GOLDEN.read_text(encoding="utf-8")
    lines = difflib.unified_diff(
        want.splitlines(keepends=True), got.splitlines(keepends=True), "golden", "this tree"
    )
    return "".join(lines)


def test_the_scenario_matches_the_golden_transcript_byte_for_byte(tmp_path: Path) -> None:
    diff = changes(play(tmp_path))
    if diff:  # the whole diff, not pytest's shortened repr of two long strings
        pytest.fail("the CLI scenario changed:\n" + diff, pytrace=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the CLI scenario on this skuferry.")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--write", type=Path, metavar="PATH", help="write its transcript here")
    what.add_argument("--diff", action="store_true", help="diff it against the golden; 1 if any")
    args = parser.parse_args(argv)
    # the sandbox serving in this process logs every request; the transcript is the point
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory(prefix="skuferry-scenario-") as folder:
        text = play(Path(folder))
    if args.write is not None:
        args.write.write_text(text, encoding="utf-8")
        return 0
    diff = changes(text)
    sys.stdout.write(diff or "the transcript matches the golden byte for byte\n")
    return 1 if diff else 0


if __name__ == "__main__":
    raise SystemExit(main())
