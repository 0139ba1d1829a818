"""The recent runs as a small SVG bar chart, made on the server (no script, no CDN).

One stacked bar per run, oldest on the left: created, updated, rejected and failed
products (unchanged ones would dwarf the rest, so they are left out), and a line of
the runs' durations on its own scale. Under the bars, the runs' ids (the runs
table's first column; every few when they would crowd), and the first and last
run's times. Colours are presentation attributes, not ``style``, so the page's
Content-Security-Policy needs no inline style; each bar has a ``<title>`` a browser
shows on hover.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from xml.sax.saxutils import escape, quoteattr

from skuferry.service.console.views import Run

WIDTH, HEIGHT = 640, 180
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 44, 44, 12, 38
CHAR_W = 6.5  # an 11 px digit's width, about: how far apart the ids must stand
SERIES = (  # bottom to top
    ("created", "#2e7d32"),
    ("updated", "#1565c0"),
    ("rejected", "#ef6c00"),
    ("failed", "#c62828"),
)
DURATION_COLOUR = "#555555"
MAX_BAR_W = 28.0  # a few runs: narrow bars, not slabs


def runs_svg(runs: Sequence[Run]) -> str:
    """The chart of ``runs`` (newest first, as the state lists them) as an ``<svg>`` element."""
    ordered = list(reversed(runs))
    label = f"writes and durations of the last {len(ordered)} runs"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label={quoteattr(label)} '
        'class="chart">',
        f"<title>{escape(label)}</title>",
    ]
    plot_w = WIDTH - PAD_LEFT - PAD_RIGHT
    plot_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    base_y = PAD_TOP + plot_h
    parts.append(
        f'<line x1="{PAD_LEFT}" y1="{base_y}" x2="{WIDTH - PAD_RIGHT}" y2="{base_y}" '
        'stroke="#999999" stroke-width="1"/>'
    )
    if not ordered:
        parts.append(
            f'<text x="{WIDTH // 2}" y="{HEIGHT // 2}" text-anchor="middle" font-size="13" '
            'fill="#666666">no runs yet</text></svg>'
        )
        return "".join(parts)
    top = max(1, *(sum(r.counts[name] for name, _ in SERIES) for r in ordered))
    longest = max(0.001, *(r.duration_s or 0.0 for r in ordered))
    slot = plot_w / len(ordered)
    bar_w = min(MAX_BAR_W, max(1.0, slot * 0.7))
    widest = max(len(str(r.id)) for r in ordered) * CHAR_W + 4
    every = max(1, math.ceil(widest / slot))  # label each run, or every n-th: none overlap
    points = []
    for i, run in enumerate(ordered):
        x = PAD_LEFT + i * slot + (slot - bar_w) / 2
        if (len(ordered) - 1 - i) % every == 0:  # the newest run is always labelled
            parts.append(_run_label(x + bar_w / 2, base_y + 13, run.id))
        y = float(base_y)
        for name, colour in SERIES:
            value = run.counts[name]
            if not value:
                continue
            h = plot_h * value / top
            y -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                f'fill="{colour}" class="bar {name}">'
                f"<title>{escape(_tip(run, name))}</title></rect>"
            )
        if run.duration_s is not None:
            dy = base_y - plot_h * run.duration_s / longest
            points.append(f"{x + bar_w / 2:.1f},{dy:.1f}")
    if points:
        parts.append(
            f'<polyline points="{" ".join(points)}" fill="none" stroke="{DURATION_COLOUR}" '
            'stroke-width="1.5" class="durations"/>'
        )
    parts.append(_axis_text(PAD_LEFT - 4, PAD_TOP + 10, f"{top:,}", "end"))
    parts.append(_axis_text(PAD_LEFT - 4, base_y, "0", "end"))
    parts.append(_axis_text(WIDTH - PAD_RIGHT + 4, PAD_TOP + 10, f"{longest:.1f} s", "start"))
    parts.append(
        _axis_text(
            PAD_LEFT, HEIGHT - 4, f"run {ordered[0].id}: " + _day(ordered[0].started_at), "start"
        )
    )
    if len(ordered) > 1:
        parts.append(
            _axis_text(
                WIDTH - PAD_RIGHT,
                HEIGHT - 4,
                f"run {ordered[-1].id}: " + _day(ordered[-1].started_at),
                "end",
            )
        )
    parts.append("</svg>")
    return "".join(parts)


def _tip(run: Run, name: str) -> str:
    took = f", {run.duration_s:.1f} s" if run.duration_s is not None else ""
    return f"run {run.id}: {run.counts[name]:,} {name}{took}"


def _run_label(x: float, y: float, run_id: int) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.0f}" text-anchor="middle" font-size="11" fill="#333333" '
        f'class="run-id">{run_id}</text>'
    )


def _axis_text(x: float, y: float, text: str, anchor: str) -> str:
    return (
        f'<text x="{x:.0f}" y="{y:.0f}" text-anchor="{anchor}" font-size="11" '
        f'fill="#555555">{escape(text)}</text>'
    )


def _day(unix: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(unix))
