"""``[mapping.tables]``: the code -> label tables ``lookup()`` reads, built once per run.

A table is given inline (``colours = { "1" = "Red" }``) or read from a CSV file
(``{ file = "categories.csv", key = "id", value = "label" }``, the file relative to
the config). Codes are compared as stripped text; a file's first row of a code wins.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from typing import Any

from skuferry.config.schema import TableFile
from skuferry.errors import SourceError
from skuferry.sync.expressions.functions import Table


def load_tables(specs: Mapping[str, Mapping[str, Any] | TableFile]) -> dict[str, Table]:
    """Every table of ``[mapping.tables]``; a file that cannot be read is a ``SourceError``."""
    tables: dict[str, Table] = {}
    for name, spec in specs.items():
        if isinstance(spec, TableFile):
            tables[name] = Table(name, _read(name, spec), spec.default)
        else:
            tables[name] = Table(name, {str(code).strip(): label for code, label in spec.items()})
    return tables


def _read(name: str, spec: TableFile) -> dict[str, str]:
    entries: dict[str, str] = {}
    try:
        with spec.file.open(encoding=spec.encoding, newline="") as handle:
            reader = csv.DictReader(handle, delimiter=spec.delimiter)
            missing = [c for c in (spec.key, spec.value) if c not in (reader.fieldnames or [])]
            if missing:
                raise SourceError(
                    f"table {name!r} ({spec.file}): no column {', '.join(map(repr, missing))} "
                    f"(columns: {', '.join(reader.fieldnames or []) or 'none'})"
                )
            for row in reader:
                code = (row.get(spec.key) or "").strip()
                if code and code not in entries:
                    entries[code] = row.get(spec.value) or ""
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise SourceError(f"table {name!r}: cannot read {spec.file}: {exc}") from exc
    return entries
