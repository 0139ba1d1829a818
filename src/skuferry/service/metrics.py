"""What a run ended with, and the Prometheus textfile that records it.

``RunOutcome`` is how the watchers (this textfile, the monitoring pings, the
systemd STATUS line) see one run, whether the engine returned a summary or
raised. ``record_run`` rewrites ``[metrics] textfile`` for node_exporter's
textfile collector after every run; the daemon's ``/metrics`` serves the same
exposition of the daemon's HTTP side. Both are built by ``render``: the
families go into a prometheus_client ``CollectorRegistry`` and come out through
``generate_latest``, so the text format is the library's, not ours.

Counters must survive restarts and one-shot runs (cron, the sync timer), so
the previous values are read back from the file itself with prometheus_client's
parser: the file is the only state. A missing or unreadable file starts the
counters at zero, which Prometheus reads as a counter reset, exactly what it is.

The file is replaced atomically by ``write_atomically`` rather than
prometheus_client's ``write_to_textfile``, for two reasons: that function leaves
the file's mode to the umask (the shipped systemd units set ``UMask=0077``,
which would make the textfile unreadable to node_exporter, another user), and
it does not fsync before the rename (a power cut could leave an empty file and
reset every counter).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from skuferry import logs
from skuferry.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_TEMPFAIL,
    SourceNotReady,
    exit_code_of,
)
from skuferry.models import METRIC_LABELS, OUTCOME_COUNTS, RunSummary, count_label
from skuferry.service.freshness import Freshness

if TYPE_CHECKING:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

# prometheus_client is imported where the exposition is written or read, not at import:
# every `skuferry sync` imports this module for RunOutcome before its first useful work.

log = logs.get(__name__)

RESULTS = ("success", "partial", "failed", "locked", "not_ready", "interrupted")
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
    # what the run raised, for ``sync`` to re-raise at the CLI edge
    exception: Exception | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_summary(
        cls, summary: RunSummary, *, duration_s: float, finished_at: float
    ) -> RunOutcome:
        return cls(summary.exit_code, duration_s, finished_at, summary=summary)

    @classmethod
    def from_error(cls, exc: BaseException, *, duration_s: float, finished_at: float) -> RunOutcome:
        code = exit_code_of(exc)
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
        """The ``result`` label: success, partial, failed, locked, not_ready (exit 75 too: the
        source's ready file did not come) or interrupted."""
        if self.error_type == SourceNotReady.__name__:
            return "not_ready"
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
            counts = ", ".join(
                f"{getattr(s, name)} {count_label(name, dry_run=s.dry_run)}"
                for name in OUTCOME_COUNTS
            )
            how = "dry run, " if s.dry_run else ""
            return f"{self.result} ({how}exit {self.exit_code}): {counts} in {self.duration_s:.1f}s"
        first_line = (self.error or "").splitlines()[0] if self.error else "no details"
        return f"{self.result} (exit {self.exit_code}): {first_line}"


Samples = Mapping[tuple[str, str | None], float]


def parse_samples(text: str) -> dict[tuple[str, str | None], float]:
    """The samples of a textfile: (sample name, value of its own label) -> value.

    Read with Prometheus' own parser, so any text-format file is understood (the
    hand-written exposition of 0.2.0 as well as prometheus_client's). Constant labels
    (``[metrics] labels``) are not part of the key: counters carry on when they change.
    A line the parser refuses loses the whole file's counters (logged by the caller's
    ``metrics.read.failed``): a counter reset, which Prometheus understands.
    """
    from prometheus_client.parser import text_string_to_metric_families

    return samples_of(text_string_to_metric_families(text))


def advance(previous: Samples, outcome: RunOutcome) -> dict[tuple[str, str | None], float]:
    """The counters and gauges after ``outcome``, as ``parse_samples`` of ``render`` would read.

    For the daemon's ``/metrics``, which carries its counters in memory between scrapes.
    """
    parts = families(
        previous, outcome, None, freshness=None, budget=None, labels=None, dead_letters=None
    )
    return samples_of(parts)


def samples_of(found: Iterable[Metric]) -> dict[tuple[str, str | None], float]:
    """(sample name, value of its own label) -> value, for the families ``found``."""
    samples: dict[tuple[str, str | None], float] = {}
    for family in found:
        for sample in family.samples:
            if not sample.name.startswith("skuferry_"):
                continue
            # one of its own labels at most; any other is a constant ([metrics] labels)
            own = [value for name, value in sample.labels.items() if name in METRIC_LABELS]
            samples[(sample.name, own[0] if own else None)] = float(sample.value)
    return samples


def render(
    previous: Samples,
    outcome: RunOutcome | None,
    products: Mapping[str, int] | None,
    freshness: Freshness | None = None,
    budget: Mapping[str, float] | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    dead_letters: Mapping[str, int] | None = None,
) -> str:
    """The new exposition: previous counters plus this run, gauges from this run. Pure.

    ``outcome`` None (``/metrics`` before the daemon's first run): the counters as
    they were, no last-run gauges. ``labels`` are added to every sample.
    """
    found = families(
        previous,
        outcome,
        products,
        freshness=freshness,
        budget=budget,
        labels=labels,
        dead_letters=dead_letters,
    )
    return exposition(found)


def exposition(*parts: Iterable[Metric]) -> str:
    """The text exposition of ``parts`` (one workspace's families, or each workspace's and
    the fleet's), rendered once by prometheus_client from one registry.

    Each part is a collector; a family two parts share (every workspace has
    ``skuferry_runs_total``) is one family with every part's samples, under one HELP and
    TYPE: a second TYPE line for a name would make the exposition invalid.
    """
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.registry import Collector

    class Part(Collector):
        def __init__(self, found: Iterable[Metric]) -> None:
            self.found = found

        def collect(self) -> Iterable[Metric]:
            return self.found

    class Together(Collector):
        """The registry's collectors' families, merged by name in first-seen order."""

        def __init__(self) -> None:
            self.parts: list[Collector] = []

        def collect(self) -> Iterable[Metric]:
            merged: dict[str, Metric] = {}
            for part in self.parts:
                for family in part.collect():
                    known = merged.get(family.name)
                    if known is None:
                        merged[family.name] = known = _empty_like(family)
                    known.samples.extend(family.samples)
            return list(merged.values())

    together = Together()
    together.parts = [Part(part) for part in parts]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(together)
    return generate_latest(registry).decode("utf-8")


def _empty_like(family: Metric) -> Metric:
    from prometheus_client.core import Metric

    return Metric(family.name, family.documentation, family.type, family.unit)


def families(
    previous: Samples,
    outcome: RunOutcome | None,
    products: Mapping[str, int] | None,
    *,
    freshness: Freshness | None,
    budget: Mapping[str, float] | None,
    labels: Mapping[str, str] | None,
    dead_letters: Mapping[str, int] | None,
) -> list[Metric]:
    """The metric families of ``render``, in exposition order (each part None: left out)."""

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
        moved["archived"] += outcome.summary.archived
        moved["restored"] += outcome.summary.restored
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
    budget = budget if budget is not None else labelled("skuferry_budget_per_minute")

    out = _Families(labels or {})
    out.counter("skuferry_runs_total", "Sync runs finished, by result.", "result", runs)
    out.gauge("skuferry_products", "Products in the local mirror, by state.", "state", states)
    out.counter("skuferry_requests_total", "API requests sent, by budget tier.", "tier", requests)
    out.counter(
        "skuferry_rate_limited_total", "API answers of 429 RATE_LIMITED.", None, rate_limited
    )
    if by_key:
        out.counter(
            "skuferry_key_requests_total",
            "API requests sent, by API key fingerprint (first 8 hex of its SHA-256).",
            "key",
            by_key,
        )
    for event, total in moved.items():
        out.counter(
            f"skuferry_{event}_total", f"Products {event} on the remote ([gone]).", None, total
        )
    out.counter(
        "skuferry_state_errors_total",
        "Runs that failed reading or writing the state file.",
        None,
        state_errors,
    )
    out.counter(
        "skuferry_rows_rejected_total",
        "Source rows that could not be read or mapped, summed over runs.",
        None,
        rows_total,
    )
    out.gauge(
        "skuferry_rows_rejected",
        "Source rows that could not be read or mapped in the last run that read the source.",
        None,
        rows_last,
    )
    dead = (
        {stage: float(n) for stage, n in dead_letters.items()}
        if dead_letters is not None
        else labelled("skuferry_dead_letters")  # no fresh counts: as last seen
    )
    out.gauge(
        "skuferry_dead_letters",
        "Products left rejected or failed (skuferry rejected), by the stage that refused them.",
        "stage",
        dead,
    )
    if budget:
        out.gauge(
            "skuferry_budget_per_minute",
            "Requests per minute this key may spend ([budget]), by tier.",
            "tier",
            budget,
        )
    out.gauge(
        "skuferry_last_full_pull_timestamp_seconds",
        "Unix time the last full source pull (whose writes were committed) started.",
        None,
        freshness.last_full_pull,
    )
    out.gauge(
        "skuferry_oldest_unsynced_change_timestamp_seconds",
        "Unix time of the oldest known source change not yet on the remote.",
        None,
        freshness.oldest_unsynced_change,
    )
    out.gauge(
        "skuferry_last_success_timestamp_seconds",
        "Unix time the last run that went through the whole catalog ended.",
        None,
        last_success,
    )
    if outcome is not None:
        out.gauge(
            "skuferry_last_run_duration_seconds",
            "Wall time of the last run.",
            None,
            outcome.duration_s,
        )
        out.gauge(
            "skuferry_last_run_exit_code",
            "Exit code of the last run (0 ok, 1 partial, 2 config, 3 unreachable, "
            "75 locked, 130 interrupted, 70 internal error).",
            None,
            float(outcome.exit_code),
        )
    return out.families


def daemon_families(
    *,
    reload_failed: bool,
    waiting_s: float | None,
    pooled: bool,
    labels: Mapping[str, str] | None,
) -> list[Metric]:
    """What a daemon says of itself besides its runs: a failed reload; in a fleet
    (``pooled``), how long its run due has waited for a slot."""
    out = _Families(labels or {})
    out.gauge(
        "skuferry_config_reload_failed",
        "1 while the last config reload failed (the daemon runs on the config it had).",
        None,
        float(reload_failed),
    )
    if pooled:
        out.gauge(
            "skuferry_run_waiting_seconds",
            "How long the run due has waited for a slot of the fleet's pool (0: none waits).",
            None,
            waiting_s or 0.0,
        )
    return out.families


def pool_families(*, slots: int, running: int, waiting: int) -> list[Metric]:
    """The fleet's pool of runs (``run --workspaces``): no workspace label."""
    out = _Families({})
    out.gauge("skuferry_run_slots", "Runs the process lets go at once (--max-runs).", None, slots)
    out.gauge("skuferry_runs_running", "Runs holding a slot now.", None, running)
    out.gauge(
        "skuferry_runs_waiting",
        "Runs due and waiting for a slot: late, never skipped.",
        None,
        waiting,
    )
    return out.families


class _Families:
    """Builds prometheus_client metric families, each with the constant labels."""

    def __init__(self, constant: Mapping[str, str]) -> None:
        self._names = list(constant)
        self._values = list(constant.values())
        self.families: list[Metric] = []

    def counter(
        self, name: str, help_text: str, label: str | None, values: Mapping[str, float] | float
    ) -> None:
        from prometheus_client.core import CounterMetricFamily

        self._add(CounterMetricFamily, name, help_text, label, values)

    def gauge(
        self,
        name: str,
        help_text: str,
        label: str | None,
        values: Mapping[str, float] | float | None,
    ) -> None:
        from prometheus_client.core import GaugeMetricFamily

        if values is not None:  # an unknown timestamp: no sample, as before
            self._add(GaugeMetricFamily, name, help_text, label, values)

    def _add(
        self,
        kind: type[CounterMetricFamily | GaugeMetricFamily],
        name: str,
        help_text: str,
        label: str | None,
        values: Mapping[str, float] | float,
    ) -> None:
        own = [label] if label else []
        family = kind(name, help_text, labels=[*own, *self._names])
        if isinstance(values, Mapping):
            for key in sorted(values):
                family.add_metric([key, *self._values], values[key])
        else:
            family.add_metric(self._values, values)
        self.families.append(family)


def record_run(
    path: Path,
    outcome: RunOutcome,
    *,
    products: Mapping[str, int] | None = None,
    freshness: Freshness | None = None,
    budget: Mapping[str, float] | None = None,
    labels: Mapping[str, str] | None = None,
    dead_letters: Mapping[str, int] | None = None,
) -> bool:
    """Fold ``outcome`` into the textfile at ``path``; False (and logged) if it cannot be written.

    Never raises: metrics are for watching a run, never a reason to fail one.
    """
    try:
        previous = parse_samples(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        previous = {}
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # ValueError: not the text format
        log.warning("metrics.read.failed", path=str(path), error=str(exc))
        previous = {}
    try:
        text = render(
            previous,
            outcome,
            products,
            freshness,
            budget,
            labels=labels,
            dead_letters=dead_letters,
        )
        write_atomically(path, text)
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
