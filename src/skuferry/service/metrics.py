"""What a run ended with, and the Prometheus textfile that records it.

``RunOutcome`` is how the watchers (this textfile, the monitoring pings, the
systemd STATUS line) see one run, whether the engine returned a summary or
raised. ``record_run`` rewrites ``[metrics] textfile`` for node_exporter's
textfile collector after every run, atomically (a temporary file in the same
directory, then ``os.replace``) so the collector never reads half a file.

Counters must survive restarts and one-shot runs (cron, the sync timer), so
the previous values are read back from the file itself: the file is the only
state. A missing or unreadable file starts the counters at zero, which
Prometheus reads as a counter reset, exactly what it is.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from skuferry import logs
from skuferry.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_TEMPFAIL,
    SkuferryError,
)
from skuferry.models import RunSummary
from skuferry.service.freshness import Freshness

log = logs.get(__name__)

EXIT_SOFTWARE = 70  # an unexpected exception (a bug), as sysexits.h names it

RESULTS = ("success", "partial", "failed", "locked", "interrupted")
TIERS = ("read", "write")


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """One finished run: its exit code, timing, and the summary or the error."""

    exit_code: int
    duration_s: float
    finished_at: float  # unix time
    summary: RunSummary | None = None
    error: str | None = None
    error_type: str | None = None  # the exception's class name, e.g. "StateError"
    # what the run raised, for ``sync`` to re-raise at the CLI edge (service/runner.py)
    exception: Exception | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_summary(
        cls, summary: RunSummary, *, duration_s: float, finished_at: float
    ) -> RunOutcome:
        return cls(summary.exit_code, duration_s, finished_at, summary=summary)

    @classmethod
    def from_error(cls, exc: BaseException, *, duration_s: float, finished_at: float) -> RunOutcome:
        code = exc.exit_code if isinstance(exc, SkuferryError) else EXIT_SOFTWARE
        message = str(exc) or type(exc).__name__
        return cls(
            code,
            duration_s,
            finished_at,
            error=message,
            error_type=type(exc).__name__,
            exception=exc if isinstance(exc, Exception) else None,
        )

    @property
    def result(self) -> str:
        """The ``result`` label: success, partial, failed, locked or interrupted."""
        return {
            EXIT_OK: "success",
            EXIT_PARTIAL: "partial",
            EXIT_TEMPFAIL: "locked",
            EXIT_INTERRUPTED: "interrupted",
        }.get(self.exit_code, "failed")

    @property
    def completed(self) -> bool:
        """The run went through the whole catalog (some products may still be rejected)."""
        return self.exit_code in (EXIT_OK, EXIT_PARTIAL)

    def one_line(self) -> str:
        """A human summary for systemd's STATUS= and logs."""
        if self.summary is not None:
            s = self.summary
            counts = (
                f"{s.created} created, {s.updated} updated, {s.adopted} adopted, "
                f"{s.unchanged} unchanged, {s.rejected} rejected, {s.failed} failed"
            )
            return f"{self.result} (exit {self.exit_code}): {counts} in {self.duration_s:.1f}s"
        first_line = (self.error or "").splitlines()[0] if self.error else "no details"
        return f"{self.result} (exit {self.exit_code}): {first_line}"


_SAMPLE = re.compile(r'^(skuferry_[a-z_]+)(?:\{[a-z_]+="((?:[^"\\]|\\.)*)"\})?\s+(\S+)\s*$')


def parse_samples(text: str) -> dict[tuple[str, str | None], float]:
    """The samples of a textfile this module wrote: (metric, label value) -> value."""
    samples: dict[tuple[str, str | None], float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, label, raw = match.groups()
        try:
            value = float(raw)
        except ValueError:
            continue
        samples[(name, _unescape(label) if label is not None else None)] = value
    return samples


def render(
    previous: Mapping[tuple[str, str | None], float],
    outcome: RunOutcome | None,
    products: Mapping[str, int] | None,
    freshness: Freshness | None = None,
    budget: Mapping[str, float] | None = None,
) -> str:
    """The new textfile: previous counters plus this run, gauges from this run. Pure.

    ``outcome`` None (``/metrics`` before the daemon's first run): the counters as
    they were, no last-run gauges.
    """

    def labelled(metric: str) -> dict[str, float]:
        return {label: v for (name, label), v in previous.items() if name == metric and label}

    runs = {result: 0.0 for result in RESULTS} | labelled("skuferry_runs_total")
    requests = {tier: 0.0 for tier in TIERS} | labelled("skuferry_requests_total")
    rate_limited = previous.get(("skuferry_rate_limited_total", None), 0.0)
    by_key = labelled("skuferry_key_requests_total")  # several API keys: by fingerprint
    # Discontinued products ([gone] action = "patch"): archived when they left, restored on return.
    moved = {
        event: previous.get((f"skuferry_{event}_total", None), 0.0)
        for event in ("archived", "restored")
    }
    state_errors = previous.get(("skuferry_state_errors_total", None), 0.0)
    # rows of the source that could not be read or mapped: in the last run, and in all
    rows_total = previous.get(("skuferry_rows_rejected_total", None), 0.0)
    rows_last = previous.get(("skuferry_rows_rejected", None))
    if outcome is not None and outcome.summary is not None:
        rows_last = float(outcome.summary.rows_rejected)
        rows_total += rows_last
    if outcome is not None:
        runs[outcome.result] = runs.get(outcome.result, 0.0) + 1
        state_errors += outcome.error_type == "StateError"
    if outcome is not None and outcome.summary is not None:
        for tier, count in outcome.summary.requests.items():
            requests[tier] = requests.get(tier, 0.0) + count
        rate_limited += outcome.summary.rate_limited
        for key, count in outcome.summary.requests_by_key.items():
            by_key[key] = by_key.get(key, 0.0) + count
        moved = {event: n + getattr(outcome.summary, event) for event, n in moved.items()}
    states = (
        {state: float(n) for state, n in products.items()}
        if products is not None
        else labelled("skuferry_products")  # no fresh counts: the mirror is as last seen
    )
    last_success = previous.get(("skuferry_last_success_timestamp_seconds", None))
    if outcome is not None and outcome.completed:
        last_success = outcome.finished_at
    freshness = freshness or Freshness(
        previous.get(("skuferry_oldest_unsynced_change_timestamp_seconds", None)),
        previous.get(("skuferry_last_full_pull_timestamp_seconds", None)),
    )

    out: list[str] = []
    _family(
        out,
        "skuferry_runs_total",
        "counter",
        "Sync runs finished, by result.",
        label="result",
        values=runs,
    )
    _family(
        out,
        "skuferry_products",
        "gauge",
        "Products in the local mirror, by state.",
        label="state",
        values=states,
    )
    _family(
        out,
        "skuferry_requests_total",
        "counter",
        "API requests sent, by budget tier.",
        label="tier",
        values=requests,
    )
    _family(
        out,
        "skuferry_rate_limited_total",
        "counter",
        "API answers of 429 RATE_LIMITED.",
        label=None,
        values={"": rate_limited},
    )
    if by_key:
        _family(
            out,
            "skuferry_key_requests_total",
            "counter",
            "API requests sent, by API key fingerprint (first 8 hex of its SHA-256).",
            label="key",
            values=by_key,
        )
    for event, total in moved.items():
        _family(
            out,
            f"skuferry_{event}_total",
            "counter",
            f"Products {event} on the remote ([gone]).",
            label=None,
            values={"": total},
        )
    _family(
        out,
        "skuferry_state_errors_total",
        "counter",
        "Runs that failed reading or writing the state file.",
        label=None,
        values={"": state_errors},
    )
    _family(
        out,
        "skuferry_rows_rejected_total",
        "counter",
        "Source rows that could not be read or mapped, summed over runs.",
        label=None,
        values={"": rows_total},
    )
    if rows_last is not None:
        _family(
            out,
            "skuferry_rows_rejected",
            "gauge",
            "Source rows that could not be read or mapped in the last run that read the source.",
            label=None,
            values={"": rows_last},
        )
    budget = budget if budget is not None else labelled("skuferry_budget_per_minute")
    if budget:
        _family(
            out,
            "skuferry_budget_per_minute",
            "gauge",
            "Requests per minute this key may spend ([budget]), by tier.",
            label="tier",
            values=budget,
        )
    if freshness.last_full_pull is not None:
        _family(
            out,
            "skuferry_last_full_pull_timestamp_seconds",
            "gauge",
            "Unix time the last full source pull (whose writes were committed) started.",
            label=None,
            values={"": freshness.last_full_pull},
        )
    if freshness.oldest_unsynced_change is not None:
        _family(
            out,
            "skuferry_oldest_unsynced_change_timestamp_seconds",
            "gauge",
            "Unix time of the oldest known source change not yet on the remote.",
            label=None,
            values={"": freshness.oldest_unsynced_change},
        )
    if last_success is not None:
        _family(
            out,
            "skuferry_last_success_timestamp_seconds",
            "gauge",
            "Unix time the last run that went through the whole catalog ended.",
            label=None,
            values={"": last_success},
        )
    if outcome is None:
        return "\n".join(out) + "\n"
    _family(
        out,
        "skuferry_last_run_duration_seconds",
        "gauge",
        "Wall time of the last run.",
        label=None,
        values={"": outcome.duration_s},
    )
    _family(
        out,
        "skuferry_last_run_exit_code",
        "gauge",
        "Exit code of the last run (0 ok, 1 partial, 2 config, 3 unreachable, "
        "75 locked, 130 interrupted, 70 internal error).",
        label=None,
        values={"": float(outcome.exit_code)},
    )
    return "\n".join(out) + "\n"


def record_run(
    path: Path,
    outcome: RunOutcome,
    *,
    products: Mapping[str, int] | None = None,
    freshness: Freshness | None = None,
    budget: Mapping[str, float] | None = None,
) -> bool:
    """Fold ``outcome`` into the textfile at ``path``; False (and logged) if it cannot be written.

    Never raises: metrics are for watching a run, never a reason to fail one.
    """
    try:
        previous = parse_samples(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        previous = {}
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("metrics.read.failed", path=str(path), error=str(exc))
        previous = {}
    try:
        write_atomically(path, render(previous, outcome, products, freshness, budget))
    except OSError as exc:
        log.warning("metrics.write.failed", path=str(path), error=exc.strerror or str(exc))
        return False
    return True


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that readers see the old or the new file, never half."""
    # The dot prefix and .tmp suffix keep node_exporter (which reads *.prom) off the temp file.
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes 0600; the collector runs as another user, and metrics are not secret.
        tmp.chmod(0o644)
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _family(
    out: list[str],
    name: str,
    kind: str,
    help_text: str,
    *,
    label: str | None,
    values: Mapping[str, float],
) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} {kind}")
    for key in sorted(values):
        suffix = f'{{{label}="{_escape(key)}"}}' if label else ""
        out.append(f"{name}{suffix} {_number(values[key])}")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)
