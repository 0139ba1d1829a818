"""Shared pieces of the benchmarks: results, machine facts, catalogs, configs, fast mirrors."""

from __future__ import annotations

import csv
import os
import platform
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from skuferry import canonical
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import Settings
from skuferry.models import Product, RawLines, RawRecord
from skuferry.remote.budget import Budget
from skuferry.remote.client import RemoteClient
from skuferry.sources.csv import CsvSource
from skuferry.state.mirror import Mirror
from skuferry.state.schema import open_state
from skuferry.sync.map.mapper import Mapper
from skuferry.sync.plan.lines import LineRoute

C = TypeVar("C", bound=RemoteClient)

KEY = "bench-key"
WORKSPACE = "bench"
HEADER = ("SKU", "Name", "Price", "Stock")
FIELDS: dict[str, Any] = {
    "sku": "SKU",
    "name": "Name",
    "price": {"column": "Price", "type": "decimal"},
    "stock": {"column": "Stock", "type": "integer"},
}


@dataclass
class Result:
    """One figure: what was measured against what was wanted."""

    figure: str
    measured: str
    target: str
    ok: bool | None  # None: informational, no target to meet
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return "info" if self.ok is None else ("PASS" if self.ok else "MISS")


def machine() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "?"
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "python": sys.version.split()[0],
        "os": f"{platform.system()} {platform.release()}",
        "load (1/5/15 min, at start)": load,
    }


def median_of(runs: int, fn: Callable[[], float]) -> tuple[float, list[float]]:
    samples = [fn() for _ in range(runs)]
    return statistics.median(samples), samples


# -- catalogs -------------------------------------------------------------------------


def row(i: int, *, changed: bool = False) -> tuple[str, str, str, str]:
    """Product i of a synthetic catalog; ``changed`` bumps its price."""
    cents = 1000 + (i * 37) % 90000 + (1 if changed else 0)
    price = f"{cents // 100}.{cents % 100:02d}"
    return (f"SKU-{i:07d}", f"Product {i} of the bench catalog", price, str(i % 500))


def rows(n: int, *, changed_every: int = 0) -> Iterator[tuple[str, str, str, str]]:
    for i in range(n):
        yield row(i, changed=bool(changed_every) and i % changed_every == 0)


def write_csv(path: Path, n: int, *, changed_every: int = 0) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(HEADER)
        out.writerows(rows(n, changed_every=changed_every))
    return path


def payload(i: int) -> dict[str, Any]:
    """Product i as the mapping sends it (what a seeded remote product holds)."""
    sku, name, price, stock = row(i)
    return {"sku": sku, "name": name, "price": canonical.loads(price), "stock": int(stock)}


# -- settings and clients --------------------------------------------------------------


def settings(
    folder: Path,
    url: str,
    *,
    reads: int = 300,
    writes: int = 60,
    limiter: str = "window",
    max_in_flight: int = 4,
    csv_name: str = "catalog.csv",
) -> Settings:
    data = {
        "api": {
            "base_url": url,
            "api_key": KEY,
            "timeout_s": 30,
            "update_method": "patch",
            "max_in_flight": max_in_flight,
        },
        "source": {"type": "csv", "path": csv_name},
        "mapping": {"key": "sku", "fields": FIELDS},
        "budget": {"read_per_minute": reads, "write_per_minute": writes, "limiter": limiter},
        "state": {"path": "skuferry.db"},
        "safety": {"max_change_ratio": 1.0},
    }
    return settings_from_dict(data, origin="bench", base_dir=folder)


def toml(folder: Path, url: str, *, reads: int, writes: int, csv_name: str = "catalog.csv") -> Path:
    """The same config as a file, for the ``skuferry`` command in a child process."""
    lines = [
        "[api]",
        f'base_url = "{url}"',
        f'api_key = "{KEY}"',
        "",
        "[source]",
        'type = "csv"',
        f'path = "{csv_name}"',
        "",
        "[mapping]",
        'key = "sku"',
        "[mapping.fields]",
        'sku = "SKU"',
        'name = "Name"',
        'price = { column = "Price", type = "decimal" }',
        'stock = { column = "Stock", type = "integer" }',
        "",
        "[budget]",
        f"read_per_minute = {reads}",
        f"write_per_minute = {writes}",
        "",
        "[state]",
        'path = "skuferry.db"',
        "",
        "[safety]",
        "max_change_ratio = 1.0",
        "",
    ]
    path = folder / "skuferry.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def client(settings: Settings, stack: ExitStack, kind: type[C]) -> C:
    """The client ``engine.run_once`` would build (a subclass can time what it does)."""
    # Here, not at the top: a bench's worker may run on a --baseline tree from before
    # the budget book, and only the benches that build a client need one.
    from skuferry.state.budgetbook import BudgetBook

    budget = Budget.from_settings(
        settings.budget, BudgetBook(lambda: open_state(settings.state.path))
    )
    stack.callback(budget.close)
    remote = kind.from_settings(settings, stop=None, budget=budget)
    stack.callback(remote.close)
    return remote


# -- a mirror in step, built directly --------------------------------------------------


def build_mirror(settings: Settings, n: int) -> float:
    """A mirror holding products 0..n-1 as SYNCED, as if a full sync had run.

    The fast path: rows are mapped and digested by skuferry's own Mapper (so the
    digests and record digests are exactly what a sync stores) and inserted in one
    transaction with fsync off; remote ids are the sandbox's form (p_000001...). Returns seconds.
    """
    started = time.perf_counter()
    mapper = Mapper(settings.mapping, source_name="catalog.csv")
    mirror = Mirror(settings.state.path)
    try:
        conn = mirror.db.conn
        conn.execute("PRAGMA synchronous = OFF")
        now = time.time()

        def items() -> Iterator[tuple[Any, ...]]:
            for i, values in enumerate(rows(n)):
                product = mapper.map(RawRecord(i + 2, dict(zip(HEADER, values, strict=True))))
                assert isinstance(product, Product)
                yield (
                    product.key,
                    "synced",
                    product.digest,
                    canonical.dumps(product.payload),
                    product.record_digest,
                    f"p_{i + 1:06d}",
                    i + 2,
                    now,
                    now,
                    now,
                )

        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO products (key, state, digest, sent, source_fingerprint, remote_id, "
            "source_line, first_seen, updated_at, synced_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
            items(),
        )
        conn.execute(
            "INSERT OR REPLACE INTO meta (name, value) VALUES ('walked_at', ?)", (repr(now),)
        )
        # bound to the sandbox it was "synced" with, as a sync leaves it: its ids are not
        # the sandbox's, and an unbound state would be looked up there and refused.
        # Imported here: a baseline tree from before the binding (issue 37) imports this
        # module too (bench.urgent's workers), and never builds a mirror this way.
        from skuferry.state import binding

        cms = binding.Binding.of(settings.api.base_url, settings.api_keys)
        conn.execute(
            "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
            (binding.META, cms.to_json()),
        )
        conn.execute("COMMIT")
        conn.execute("PRAGMA synchronous = FULL")
    finally:
        mirror.close()
    return time.perf_counter() - started


def learn_lines(settings: Settings, csv_path: Path, *, skip_every: int = 0) -> int:
    """Store the line digests a quiet sync of ``csv_path`` would learn (sync/plan/lines.py).

    The rows of a mirror built by ``build_mirror`` are recognised by record digest; the
    sync after that stores each line's digest. Here they are computed directly with the
    route's own key reader and digest, per block of lines. ``skip_every``: every such
    row (from the middle of each stretch) is left without one, as the rows the last run
    wrote are (their record digest changed: their next run parses them). Returns rows learnt.
    """
    mapper = Mapper(settings.mapping, source_name=csv_path.name)
    lines = CsvSource(csv_path).lines()
    route = LineRoute(lines, mapper, mapper.key_column)
    mirror = Mirror(settings.state.path)
    learnt = 0
    try:
        mirror.db.conn.execute("PRAGMA synchronous = OFF")
        lookup = mirror.known()
        for block in lines:
            if not isinstance(block, RawLines):
                raise RuntimeError(f"the bench catalog has a line that is not plain: {block}")
            keys = route.keys(block)
            hits = lookup.recognisable([k for k in keys if k is not None])  # type: ignore[attr-defined]
            digest = route.digester()
            items = []
            for number, (text, key) in enumerate(zip(block.texts, keys, strict=True), block.start):
                if skip_every and (number - 2) % skip_every == skip_every // 2:
                    continue
                _key, slot, _digest, record_digest, _line = hits[key]
                items.append((slot, record_digest, digest(record_digest, text)))
            learnt += mirror.remember_line_digests(items)
        mirror.db.conn.execute("PRAGMA synchronous = FULL")
    finally:
        mirror.close()
    return learnt


def as_schema_5(state: Path) -> None:
    """Turn a state file of this tree back into what schema 5 (main before the line
    digests) opens: a baseline tree refuses a newer file. Bench use only."""
    as_older_schema(state, "products", "source_line_digest", 5, vacuum=True)


def as_older_schema(
    state: Path, table: str, column: str, version: int, *, vacuum: bool = False
) -> None:
    """Drop ``table.column``, the column schema ``version`` lacks, and say ``version``: a
    baseline tree of that schema then opens a state file this tree wrote (it refuses a
    newer one). Bench use only."""
    import sqlite3

    conn = sqlite3.connect(state, isolation_level=None)
    try:
        columns = [c[1] for c in conn.execute(f"PRAGMA table_info({table})")]
        if column in columns:
            conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
            conn.execute(f"PRAGMA user_version = {version}")
        if vacuum:
            conn.execute("VACUUM")
    finally:
        conn.close()


def free_port() -> int:
    """A loopback port free now (a daemon's HTTP side binds it next)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def replace_csv(path: Path, header: Sequence[str], rows: Iterable[Mapping[str, str]]) -> None:
    """Write ``rows`` beside ``path`` and move them over it: replaced whole, as an ERP
    export is, so a watching daemon never reads half a file."""
    tmp = path.with_name(path.name + ".part")
    with tmp.open("w", newline="", encoding="utf-8") as f:
        out = csv.DictWriter(f, fieldnames=list(header))
        out.writeheader()
        out.writerows(rows)
    tmp.replace(path)
