"""Memory and time of the file readers on big exports: a 200k-row XLSX, a 300 MB XML.

Each file is generated first (our own synthetic data), then read end to end by the
source adapter in a child process, so the peak RSS (``resource.getrusage``) is that
of reading alone: flat memory means it stays near the interpreter's own footprint
whatever the row count. ``--quick`` shrinks both files tenfold.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.common import Result
from skuferry.sandbox.catalog_files import bmecat_article, write_xlsx_rows

# Read in a fresh interpreter: prints {"records": n, "seconds": s, "rss_mb": peak}.
_READER = """
import json, resource, sys, time
from bench.readers import peak_mb
from skuferry import logs
logs.configure(level="error")
kind, path, extra = sys.argv[1], sys.argv[2], sys.argv[3]
if kind == "xlsx":
    from skuferry.sources.xlsx import XlsxSource
    source = XlsxSource(path, reader=extra or "calamine")
else:
    from skuferry.sources.xml import XmlSource
    source = XmlSource(path, record=extra)
started = time.perf_counter()
records = sum(1 for _ in source.records())
seconds = time.perf_counter() - started
print(json.dumps({"records": records, "seconds": seconds, "rss_mb": peak_mb()}))
"""
_WRITER = """
import json, sys
from pathlib import Path
from bench import readers
count = getattr(readers, sys.argv[1])(Path(sys.argv[2]), int(sys.argv[3]))
print(json.dumps({"records": count}))
"""
_BASELINE = """
import json
import skuferry.sources.xlsx, skuferry.sources.xml
from bench.readers import peak_mb
print(json.dumps({"rss_mb": peak_mb()}))
"""
RSS_LIMIT_MB = 200  # flat: the interpreter and openpyxl, not the catalog


def peak_mb() -> float:
    """This process's peak RSS in MB: ``getrusage``, or Linux's VmHWM when lower.

    A child's ``ru_maxrss`` starts at its parent's size (it is carried over exec),
    which would hide a reader smaller than the bench process; VmHWM is the new
    process's own high-water mark.
    """
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    try:
        status = Path("/proc/self/status").read_text(encoding="ascii")
    except OSError:
        return peak
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return min(peak, int(line.split()[1]) / 1024)
    return peak


def _child(code: str, *args: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _rows(n: int) -> Iterator[list[str | int | float]]:
    yield ["Artikelnummer", "Bezeichnung", "EAN", "Preis", "Menge", "Beschreibung"]
    for i in range(n):
        yield [
            f"{i:06d}",
            f"Akku-Bohrschrauber Modell {i}",
            4006381000000 + i,
            round(19.99 + i % 500 * 0.35, 2),
            i % 97,
            f"Artikel {i}: robust, 18 V, {i % 7} Ah",
        ]


@dataclass
class _Read:
    records: int  # what the file holds
    made_s: float  # time to write it
    size_mb: float
    base_mb: float  # the interpreter with the readers imported, reading nothing
    got: dict[str, float]  # the child's records, seconds, rss_mb


def _measure(path: Path, writer: str, size: int, kind: str, record: str = "") -> _Read:
    # Written in a child too: a child's ru_maxrss starts at its parent's size, so the
    # parent must stay small for the reader's figure to be the reader's own.
    t0 = time.perf_counter()
    records = int(_child(_WRITER, writer, str(path), str(size))["records"])
    made = time.perf_counter() - t0
    base = _child(_BASELINE)["rss_mb"]
    got = _child(_READER, kind, str(path), record)
    return _Read(records, made, path.stat().st_size / 1e6, base, got)


def _result(figure: str, read: _Read, note: str) -> Result:
    got = read.got
    return Result(
        figure=figure,
        measured=f"{got['seconds']:.1f} s, peak RSS {got['rss_mb']:.0f} MB",
        target=f"every record, peak RSS <= {RSS_LIMIT_MB} MB",
        ok=got["records"] == read.records and got["rss_mb"] <= RSS_LIMIT_MB,
        notes=[
            f"{note} ({read.size_mb:.1f} MB, written in {read.made_s:.0f} s): "
            f"{got['records']:.0f} records, {got['records'] / got['seconds']:.0f} records/s, "
            f"{read.size_mb / got['seconds']:.1f} MB/s; the interpreter with the readers "
            f"imported, reading nothing: {read.base_mb:.0f} MB"
        ],
    )


def xlsx(quick: bool) -> Result:
    """Both readers on one file, alternated (calamine, openpyxl, calamine, ...), 3 each."""
    n = 20_000 if quick else 200_000
    runs = 3
    with tempfile.TemporaryDirectory(prefix="skuferry-bench-") as tmp:
        path = Path(tmp) / "export.xlsx"
        read = _measure(path, "write_xlsx", n, "xlsx", "calamine")
        fast: list[dict[str, float]] = [read.got]
        slow: list[dict[str, float]] = []
        for i in range(2 * runs - 1):
            reader = "openpyxl" if i % 2 == 0 else "calamine"
            (slow if reader == "openpyxl" else fast).append(
                _child(_READER, "xlsx", str(path), reader)
            )
    read.got = {
        "records": min(g["records"] for g in fast),
        "seconds": statistics.median(g["seconds"] for g in fast),
        "rss_mb": max(g["rss_mb"] for g in fast),
    }
    old = statistics.median(g["seconds"] for g in slow)
    fast_s = ", ".join(f"{g['seconds']:.1f}" for g in fast)
    slow_s = ", ".join(f"{g['seconds']:.1f}" for g in slow)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    note = (
        f"{n} rows x 6 columns, text in a shared-strings table as Excel writes it; "
        f"calamine (the default) {fast_s} s, peak RSS {read.got['rss_mb']:.0f} MB (it holds "
        f'the sheet); openpyxl ([source] reader = "openpyxl") {slow_s} s, peak RSS '
        f"{max(g['rss_mb'] for g in slow):.0f} MB (streamed); openpyxl/calamine "
        f"{old / read.got['seconds']:.1f}x; load average {load}"
    )
    return _result(f"xlsx {n // 1000}k rows (calamine; openpyxl {old:.1f} s)", read, note)


def xml(quick: bool) -> Result:
    size = (30 if quick else 300) * 1_000_000
    with tempfile.TemporaryDirectory(prefix="skuferry-bench-") as tmp:
        read = _measure(Path(tmp) / "bmecat.xml", "write_bmecat", size, "xml", "ARTICLE")
    return _result(f"xml {read.size_mb:.0f} MB", read, "BMEcat-shaped ARTICLE records")


def write_xlsx(path: Path, n: int) -> int:
    write_xlsx_rows(path, _rows(n))
    return n


def write_bmecat(path: Path, target_bytes: int) -> int:
    ns = "http://www.bmecat.org/bmecat/1.2/bmecat_new_catalog"
    count = 0
    with path.open("w", encoding="utf-8") as out:
        out.write(
            f'<?xml version="1.0" encoding="UTF-8"?>\n<BMECAT version="1.2" xmlns="{ns}">'
            "<T_NEW_CATALOG>\n"
        )
        while out.tell() < target_bytes:
            out.write(
                bmecat_article(
                    f"{count:07d}",
                    f"Artikel {count}",
                    ean=str(4006381000000 + count),
                    price=f"{19 + count % 500}.{count % 100:02d}",
                    features=[("Spannung", "18 V"), ("Gewicht", f"{count % 9},5 kg")],
                    long="Robust & leicht. " * 8,
                )
            )
            count += 1
        out.write("</T_NEW_CATALOG></BMECAT>\n")
    return count
