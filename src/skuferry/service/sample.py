"""``skuferry check``'s sample: the first records as skuferry reads them, and what the
mapping makes of each, so an operator can write ``path``s and types without guessing.

"As read" is as the mapping reads it: grouped, unnested (an item of ``each``, its
record as ``parent``), joined (the partner under the join's name) and filtered.

Records are shown JSON-like, in source order: text in quotes, numbers bare with the
digits the source gave (``19.90``), anything that is not JSON (a date from SQL) as
Python shows it. Long text and long lists are cut; the count of what was cut is shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from skuferry import canonical
from skuferry.models import BadRecord, Product, RawRecord
from skuferry.sync.map.mapper import Mapper

MAX_TEXT = 120  # characters of a text value shown
MAX_ITEMS = 20  # items of a list shown


@dataclass(frozen=True, slots=True)
class Sample:
    """One record as read (or the source's rejection of it) and the mapping's result."""

    record: RawRecord | BadRecord
    result: Product | BadRecord


def sampled(
    records: Iterable[RawRecord | BadRecord], mapper: Mapper, *, keep: int, into: list[Sample]
) -> Iterator[Product | BadRecord]:
    """Map a source's stream like ``map_records``, keeping the first ``keep`` in ``into``."""
    for record in records:
        result = record if isinstance(record, BadRecord) else mapper.map(record)
        if len(into) < keep:
            into.append(Sample(record, result))
        yield result


def render(samples: list[Sample]) -> list[str]:
    """The lines ``check`` prints for the samples."""
    lines: list[str] = []
    for number, sample in enumerate(samples, 1):
        record, result = sample.record, sample.result
        if isinstance(record, BadRecord):
            lines.append(f"record {number} (line {record.line}): the source could not read it:")
            lines.append(f"  {record.reason}")
            continue
        where = record.label or f"record {number} (line {record.line})"  # an item of `each`
        lines.append(f"{where}, as read from the source:")
        lines.append(_indented(json_like(record.fields)))
        if isinstance(result, BadRecord):
            lines.append("  mapped: rejected:")
            lines.append(f"  {result.reason}")
        else:
            lines.append(f"  mapped to the payload sent for key {result.key!r}:")
            lines.append(_indented(json_like(result.payload)))
    return lines


def json_like(value: Any, indent: str = "") -> str:
    """``value`` as indented JSON, numbers verbatim, long text and lists cut."""
    inner = indent + "  "
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f"{inner}{_scalar(str(k))}: {json_like(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    if isinstance(value, list | tuple):
        if not value:
            return "[]"
        items = [inner + json_like(v, inner) for v in value[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            items.append(f"{inner}... {len(value) - MAX_ITEMS:,} more")
        return "[\n" + ",\n".join(items) + f"\n{indent}]"
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return f"{_scalar(value[:MAX_TEXT] + '...')} ({len(value):,} characters)"
    return _scalar(value)


def _scalar(value: Any) -> str:
    try:
        return canonical.dumps(value)
    except (TypeError, ValueError):  # not a JSON value (a date, NaN): as Python shows it
        return repr(value)


def _indented(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
