"""``[[join]]``: other sources whose records add fields to each primary record.

Reading a join's source is the source adapters' job (``sources/``), keeping its
records on disk the join index's; this module ties them
together: per join, the index is reused when the source's signature (its change
token: the one the primary source's skip decision uses) did
not change since it was built (the source is then not read at all), else rebuilt from
the source. Combining a primary record with its partner happens in the pieces stream.

What a join's pull proved is its completeness ``Verdict``, kept with its index
so a reused index proves the same: complete when every record its source gave could be
used, else not, naming the first one that could not. A join whose source gave no record
at all is an empty export: refused (``EmptySourceRefused``) like an empty primary
source, since every product would otherwise take the join's default.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import jmespath.exceptions

from skuferry import canonical, completeness, logs
from skuferry.config.schema import FileSourceSettings, JoinSettings
from skuferry.errors import EmptySourceRefused
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.dispatch import open_source
from skuferry.sources.signature import source_signature
from skuferry.state.joins import BuildFacts, Entry, JoinIndex
from skuferry.sync.expressions.functions import Refused, compiler
from skuferry.sync.read.where import Lacking, Where, truthy

__all__ = ["Join", "Reader", "column_or_path", "decode", "key_text", "open_joins", "truthy"]

log = logs.get(__name__)

Reader = Callable[[dict[str, Any]], Any]


def key_text(value: Any) -> str | None:
    """A join key as stripped text (numbers as written); None when there is none."""
    if value is None or isinstance(value, bool | dict | list):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # an XLSX number cell 12346.0 -> "12346"
    text = value.strip() if isinstance(value, str) else str(value)
    return text or None


def column_or_path(expression: str, compile_path: Callable[[str], Reader] | None = None) -> Reader:
    """Read ``expression`` from a record: the column of that name when the record has one,
    else the JMESPath path (so ``"Variant SKU"`` and ``parent.id`` both work)."""
    try:
        search: Reader | None = (compile_path or compiler())(expression)
    except jmespath.exceptions.JMESPathError:
        search = None  # not a path ("Variant SKU"): a column only

    def read(fields: dict[str, Any]) -> Any:
        if expression in fields:
            return fields[expression]
        if search is None:
            return None
        try:
            return search(fields)
        except jmespath.exceptions.JMESPathError:
            return None

    return read


def encode(fields: dict[str, Any]) -> str:
    """A join record as JSON text, numbers as written; values JSON lacks (dates) as text."""
    try:
        return canonical.dumps(fields)
    except (TypeError, ValueError):
        return json.dumps(fields, default=str, ensure_ascii=False)


# canonical.loads semantics with one decoder for the run (json.loads builds one per call)
_DECODE = json.JSONDecoder(parse_float=Decimal).decode


def decode(text: str) -> dict[str, Any]:
    """A join record as ``encode`` wrote it (numbers with a fraction as Decimal)."""
    found: dict[str, Any] = _DECODE(text)
    return found


@dataclass
class Join:
    """One join, open for the run."""

    name: str
    on: Reader  # the primary record's matching value
    on_text: str  # the `on` setting, for messages
    index: JoinIndex
    read: bool  # whether its source was read (and the index rebuilt) in this run
    facts: BuildFacts
    label: str = ""  # "join 'pim' (pim.jsonl)", for the run's notes
    token: str | None = None  # its source's change token, taken before reading; None: unknown
    file: str = ""  # "pim.jsonl": its source's file name (or type), for a held record's reason
    content: str | None = None  # its source's feed digest (kept in the index); None: unknown

    @property
    def verdict(self) -> completeness.Verdict:
        """What its pull proved: complete when the join could use every record it read."""
        facts = self.facts
        if not facts.unreadable:
            return completeness.Verdict(completeness.Reader.JOIN, self.name, complete=True)
        return completeness.Verdict(
            completeness.Reader.JOIN,
            self.name,
            complete=False,
            reason=(
                f"{facts.unreadable} record(s) of {self.file} could not be read (first: "
                f"{self.file}:{facts.unreadable_line}: {facts.unreadable_reason}); a product "
                "whose partner is missing is held"
            ),
        )

    def report(self, ledger: completeness.Ledger) -> None:
        """Tell the run's ledger what this join's pull proved."""
        ledger.report(self.verdict)

    def unknown(self, key: str, held: dict[str, tuple[int, str]]) -> str:
        """Why a primary record whose partner (``key``) is missing, in a join that is not
        complete, is held: the record with that key, when the join could not use it
        (``held``: ``JoinIndex.held_many``), else the first record it could not use."""
        if key in held:
            line, why = held[key]
            return (
                f"its partner in join {self.name!r} (key {key!r}) is {self.file}:{line}, "
                f"which could not be read: {why}"
            )
        facts = self.facts
        if facts.unreadable_line is None:  # another reader of the run said it is not whole
            return (
                f"its partner in join {self.name!r} (key {key!r}) is missing, and the join's "
                "read is not complete"
            )
        others = f", one of {facts.unreadable} such record(s)" if facts.unreadable > 1 else ""
        return (
            f"its partner in join {self.name!r} (key {key!r}) may be in "
            f"{self.file}:{facts.unreadable_line}, which could not be read: "
            f"{facts.unreadable_reason}{others}"
        )

    def notes(self) -> list[str]:
        """The run's remarks on this join: duplicate keys, records it could not use."""
        facts = self.facts
        found = []
        if facts.duplicates:
            found.append(
                f"join {self.name!r}: {facts.duplicates} record(s) repeat a key "
                f"(e.g. {facts.duplicate_example}); the first record of a key wins"
            )
        if facts.unreadable:
            found.append(
                f"join {self.name!r}: {facts.unreadable} record(s) could not be used "
                f"(first: {facts.unreadable_example})"
            )
        return found

    def close(self) -> None:
        self.index.close()


def open_joins(
    specs: list[JoinSettings],
    scratch: Path,
    *,
    build_in: Path | None = None,
    stop: threading.Event | None = None,
    allow_empty: bool = False,
) -> list[Join]:
    """Every join, its index current (read again only when its source changed).

    Indexes are kept in ``scratch``; with ``build_in``, a stale one is built there
    instead and ``scratch`` is only read (a dry run). ``stop`` (the engine's stop event)
    ends a join source's waits between retries, as it does the primary source's.
    A join whose source gave no record raises ``EmptySourceRefused`` unless
    ``allow_empty`` (``sync --allow-empty-source``).
    """
    joins: list[Join] = []
    try:
        for spec in specs:
            joins.append(_open(spec, scratch, build_in, stop))
            _refuse_empty(joins[-1], allow_empty)
    except BaseException:
        for join in joins:
            join.close()
        raise
    return joins


def _refuse_empty(join: Join, allow_empty: bool) -> None:
    if join.facts.read or allow_empty:
        return
    raise EmptySourceRefused(
        f"join {join.name!r} ({join.file}) is empty: it gave no record, so every product "
        "would lose its partner (and take the join's default); nothing was written "
        "(a failed export?). Pass --allow-empty-source if this is intended."
    )


def _open(
    spec: JoinSettings, scratch: Path, build_in: Path | None, stop: threading.Event | None
) -> Join:
    settings = spec.model_dump_json()
    identity = hashlib.blake2b(settings.encode(), digest_size=16).hexdigest()
    name = f"join-{spec.name}.sqlite"
    # the token the index was built with goes back to the source (a conditional request)
    stored = JoinIndex.stored_signature(scratch / name)
    previous = stored.removeprefix(f"{identity}|") if stored else None
    if previous == stored:
        previous = None  # built from other settings: their token says nothing here
    # taken before reading: a change meanwhile rebuilds next time
    found = source_signature(spec.source, previous, stop=stop)
    signature = f"{identity}|{found}" if found is not None else None
    index = JoinIndex.current(scratch / name, signature)
    read = index is None
    if index is None:
        path = (build_in or scratch) / name
        source = open_source(spec.source, stop=stop)
        log.info("join.read", join=spec.name, source=source.describe())
        index = JoinIndex.build(
            path,
            _entries(spec, source.records()),
            signature=signature,
            content=source.feed_digest,  # asked once its records were all read
        )
    else:
        log.info("join.reused", join=spec.name, why="its source did not change")
    file = _file_name(spec)
    facts = index.facts()
    on = column_or_path(spec.on)
    label = f"join {spec.name!r} ({file})"
    return Join(spec.name, on, spec.on, index, read, facts, label, found, file, index.content())


def _file_name(spec: JoinSettings) -> str:
    """The join source's file name (no folder, no query), or its type."""
    settings = spec.source
    if isinstance(settings, FileSourceSettings):
        return str(settings.path).split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return f"{settings.type} source"


def _entries(spec: JoinSettings, records: Iterator[RawRecord | BadRecord]) -> Iterator[Entry]:
    key = column_or_path(spec.key)
    where = spec.source.where
    keep = Where(where, compiler()) if where else None
    for record in records:
        if isinstance(record, BadRecord):
            # its key when the source read it for sure: only that partner is in doubt
            sure = record.fields if record.fields is not None and not record.guessed else None
            yield key_text(key(dict(sure))) if sure else None, record.line, record.reason, False
            continue
        found = key_text(key(record.fields))
        if keep is not None:
            try:
                if not keep.keeps(record.fields):
                    yield None, record.line, "", None  # read, left out
                    continue
            except (Lacking, Refused, jmespath.exceptions.JMESPathError) as exc:
                yield found, record.line, f"where = {where}: {exc}", False
                continue
        if found is None:
            yield None, record.line, f"no key at {spec.key!r}", False
        else:
            yield found, record.line, encode(record.fields), True
