"""A million-row primary joined to a million-row join: time and peak RSS of the pull.

``python -m bench.joins [--rows N]`` writes our own synthetic files (an ERP's ``;``
CSV with price and stock, a PIM's JSON Lines with names and descriptions), then
pulls them as a sync run does (``open_pieces`` + the mapping over every record:
read, join, map) in a fresh interpreter, three times:

1. first run: the join's index is built from the PIM file, then the primary is
   joined record by record (batched lookups on disk);
2. only the primary changed: the join's file did not, so its index is reused and
   the PIM file is not read;
3. baseline: the primary alone, without the join, to show what joining costs.

The pull is what joins add to a run; planning and writing are measured elsewhere
(``bench.local``) and do not depend on where a field came from.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from skuferry.sources.change_token import RACY_S

_PULL = """
import json, resource, sys, time
from contextlib import ExitStack
from pathlib import Path
from bench.readers import peak_mb
from skuferry import logs
from skuferry.config.load import settings_from_dict
from skuferry.sync.map.mapper import Mapper
from skuferry.sync.read.pieces import joins_read, open_pieces
logs.configure(level="error")
folder, with_join = Path(sys.argv[1]), sys.argv[2] == "join"
fields = {
    "sku": "Artikelnummer",
    "price": {"column": "Preis", "type": "decimal", "decimal": ","},
    "stock": {"column": "Bestand", "type": "integer"},
}
data = {
    "api": {"base_url": "http://127.0.0.1:9", "api_key": "bench"},
    "source": {"type": "csv", "path": "erp.csv", "delimiter": ";"},
    "mapping": {"key": "sku", "fields": fields},
    "state": {"path": "state/skuferry.db"},
}
if with_join:
    fields["name"] = {"path": "pim.name", "required": True}
    fields["description"] = {"path": "pim.description"}
    data["join"] = [{"name": "pim", "type": "jsonl", "path": "pim.jsonl",
                     "key": "sku", "on": "Artikelnummer"}]
settings = settings_from_dict(data, base_dir=folder)
started = time.perf_counter()
good = bad = 0
with ExitStack() as stack:
    source, tables = open_pieces(settings, stack)
    joined = time.perf_counter() - started
    mapper = Mapper(settings.mapping, tables=tables, joins=["pim"] if with_join else [])
    for record in source.records():
        if hasattr(mapper.map(record), "payload"):
            good += 1
        else:
            bad += 1
    read = joins_read(source)
seconds = time.perf_counter() - started
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"good": good, "bad": bad, "seconds": seconds, "index_s": joined,
                  "cpu_s": usage.ru_utime + usage.ru_stime,
                  "rss_mb": peak_mb(), "joins": read}))
"""


def write_files(folder: Path, rows: int, *, version: int = 0) -> None:
    """The ERP's CSV (``version`` changes every 100th price) and, once, the PIM's JSONL."""
    with (folder / "erp.csv").open("w", encoding="utf-8") as erp:
        erp.write("Artikelnummer;Preis;Bestand\n")
        for i in range(rows):
            cents = (i * 7 + (version if i % 100 == 0 else 0)) % 100
            erp.write(f"{i:07d};{19 + i % 500},{cents:02d};{i % 97}\n")
    pim = folder / "pim.jsonl"
    if not pim.exists():
        with pim.open("w", encoding="utf-8") as out:
            for i in range(rows):
                out.write(
                    json.dumps(
                        {
                            "sku": f"{i:07d}",
                            "name": f"Akku-Bohrschrauber Modell {i}",
                            "description": f"<p>Robust, 18 V, {i % 7} Ah. Artikel {i}.</p>",
                            "enabled": True,
                        }
                    )
                    + "\n"
                )


def pull(folder: Path, *, join: bool) -> dict[str, object]:
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{root / 'src'}"}
    done = subprocess.run(
        [sys.executable, "-c", _PULL, str(folder), "join" if join else "alone"],
        capture_output=True,
        text=True,
        check=False,
        timeout=7200,
        env=env,
        cwd=root,
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="skuferry-bench-joins-") as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        write_files(folder, args.rows)
        sizes = {p.name: p.stat().st_size / 1e6 for p in folder.iterdir()}
        print(f"rows: {args.rows:,}; files written in {time.perf_counter() - started:.1f} s: "
              + ", ".join(f"{name} {mb:.0f} MB" for name, mb in sorted(sizes.items())))  # fmt: skip
        # a file younger than the racy window has no signature: its index would be rebuilt
        age = time.time() - (folder / "pim.jsonl").stat().st_ctime
        time.sleep(max(0.0, RACY_S - age + 0.1))
        first = pull(folder, join=True)
        time.sleep(0.01)  # a new mtime for the changed primary
        write_files(folder, args.rows, version=1)
        second = pull(folder, join=True)
        alone = pull(folder, join=False)
        index = folder / "state" / "skuferry.db.scratch" / "join-pim.sqlite"
        print(f"join index on disk: {index.stat().st_size / 1e6:.0f} MB")
        for label, result in (
            ("first run (join read, index built)", first),
            ("only the primary changed (index reused)", second),
            ("baseline: the primary alone, no join", alone),
        ):
            print(
                f"{label}: {result['seconds']:.1f} s wall, {result['cpu_s']:.1f} s CPU "
                f"(join index ready after {result['index_s']:.1f} s), "
                f"peak RSS {result['rss_mb']:.0f} MB, {result['good']:,} mapped, "
                f"{result['bad']:,} rejected, joins {result['joins']}"
            )


if __name__ == "__main__":
    main()
