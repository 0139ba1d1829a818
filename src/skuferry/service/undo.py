"""``skuferry undo``'s words: an undo's report on a terminal (``--json``: its ``as_json``).

The undo itself is a run of the sync (``sync.undo``); this says, product by product, what
it put back (or, dry, would put back), what it left and why, and what it listed for the
operator.
"""

from __future__ import annotations

from typing import IO, Any

from skuferry import canonical
from skuferry.sync.plan import undoing
from skuferry.sync.undo import UndoReport

SHOWN = 200  # products listed on a terminal (--json lists every one)


def value(v: Any) -> str:
    """A field's value as the story shows it: strings quoted, null as "nothing"."""
    if v is None:
        return "nothing"
    return repr(v) if isinstance(v, str) else canonical.dumps(v)


def print_report(report: UndoReport, out: IO[str]) -> None:
    dry = report.dry_run
    head = f"undo of run {report.undoes}"
    head += " (dry run: nothing written)" if dry else f" (run {report.run_id})"
    if report.resumed:
        head += ", going on after an undo cut short"
    out.write(head + "\n")
    data = report.as_json()
    width = max((len(s.key) for s in report.steps[:SHOWN]), default=0)
    for change in data["changes"][:SHOWN]:
        for line in _lines(change, dry=dry):
            out.write(f"  {change['key'].ljust(width)}  {line}\n")
    if len(report.steps) > SHOWN:
        out.write(f"  ... and {len(report.steps) - SHOWN} more (--json lists every one)\n")
    for key in report.missing:
        out.write(f"  {key}: run {report.undoes} did not write this product\n")
    out.write(_totals(data, dry=dry) + "\n")
    for note in data["notes"]:
        out.write(f"note: {note}\n")
    for problem in data["problems"]:
        if problem["key"] not in report.missing:
            out.write(f"problem: {problem['key']}: {problem['reason']}\n")


def _lines(change: dict[str, Any], *, dry: bool) -> list[str]:
    outcome, did = change["outcome"], change["did"]
    if change["action"] == undoing.LIST:
        return [f"{did}: {change['reason']}"]
    if outcome in ("gone", "not_applied", "failed") and not change["fields"]:
        return [f"{did}: {change['reason'] or outcome}"]
    if change["action"] == undoing.ARCHIVE:
        patch = ", ".join(f"{f['field']} {value(f['back'])}" for f in change["fields"])
        return [f"created by the run: {'would be ' if dry else ''}archived ({patch})"]
    lines = []
    for f in change["fields"]:
        if f["result"] == undoing.PUT_BACK:
            verb = "would go back" if dry else "back"
            lines.append(f"{f['field']} {value(f['sent'])} → {value(f['back'])} ({verb})")
        elif f["result"] == undoing.ALREADY:
            lines.append(f"{f['field']} {value(f['back'])}: already back")
        else:
            lines.append(f"{f['field']}: left: {f['reason']}")
    if outcome == "failed":
        lines.append("not put back: see the problems below")
    return lines


def _totals(data: dict[str, Any], *, dry: bool) -> str:
    would = "would be " if dry else ""
    parts = [
        f"{data['put_back']} product(s) {would}put back",
        f"{data['archived']} {would}archived",
        f"{data['already']} already back",
        f"{data['left']} left",
        f"{data['listed']} listed",
    ]
    for name in ("failed", "gone", "not_applied"):
        if data[name]:
            parts.append(f"{data[name]} {name.replace('_', ' ')}")
    return "; ".join(parts)
