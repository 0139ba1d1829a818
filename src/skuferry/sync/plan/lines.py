"""The line route: an unchanged CSV line is recognised from its text, never parsed.

A quiet run of a large CSV spends most of its time reading rows into records only to
find them unchanged. ``CsvSource.lines()`` hands over each line that is one whole
record without a quote as text (``RawLines``), and the planner (``plan(lines=...)``)
recognises it by one hash of that text, checked against the digest the mirror holds
beside the row's record digest (``products.source_line_digest``). Any line not
recognised so is parsed (``LineRoute.parse``) into exactly the records
``records()`` yields for it, and planned as before.

Why an equal line digest proves what the record digest proves. The digest hashes

- the mapping's record digest seed (``Mapper.seed``: the mapping, its tables' data,
  ``empty_values``),
- the reader's identity (``CsvLines.identity``: delimiter, encoding, the header line
  as written, BOM and line break included),
- the record digest the row holds, and the line's text (its line break included).

A row learns its line digest only when the line was read in full and its record's
record digest equalled the row's (``plan``: ``learn``), so equal digests mean the same
text read the same way under the same mapping, hence the same record and the same
record digest: the row would be recognised by record digest too. The row's record digest
is inside the hash: a row whose record digest changed since (written, cleared, mapped
anew) no longer matches, whatever is left in its line digest column.

The route is taken only when nothing between the file and the mapping can change a
record (``line_route``): the source is a plain CSV file (no ``skip_if_empty``,
``where``, ``[[join]]``, ``group_by`` or ``each``), and the mapping reads columns
only (no path, so no table lookup or join outside the line counts). Duplicate keys,
bad rows, rows not SYNCED or with an open intent take the planner's usual way:
the route only replaces, for one line, the record digest check by the line check.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator

from skuferry import canonical
from skuferry.models import BadRecord, RawLines, RawRecord
from skuferry.sources.base import Source
from skuferry.sources.csv import CsvLines, CsvSource
from skuferry.sources.ready import ReadySource
from skuferry.sync.map.mapper import Mapper

# A new one makes every row learn its line digest again, once. 2: a row short of the
# header is held now (short_rows), so a digest learnt when it was read must not hold.
LINE_DIGEST_VERSION = "2"


class LineRoute:
    """What ``plan(lines=...)`` needs of a CSV read line by line (a ``LineReader``)."""

    def __init__(
        self, lines: CsvLines, mapper: Mapper, key_column: str, ready: ReadySource | None = None
    ) -> None:
        self._lines = lines
        self._ready = ready
        self._mapper = mapper
        self._key_column = key_column
        self._delimiter = lines.source.delimiter
        self._index: int | None = None
        self._indexed = False

    def records(self) -> Iterator[RawRecord | BadRecord | RawLines]:
        if self._ready is not None:  # [source] ready_file: read once the exporter is done
            return self._ready.gated(lambda: iter(self._lines))
        return iter(self._lines)

    def keys(self, block: RawLines) -> list[str | None]:
        """The key of each line as ``Mapper.key_reader`` reads it from the parsed record
        (the key column's text as ``canonical.key`` makes it: stripped, NFC; None when
        empty or absent). A line whose key is written in NFD is then found by its row."""
        texts = block.texts
        index = self._key_index()
        delimiter = self._delimiter
        if index is None:
            return [None] * len(texts)
        if index == 0:
            cells = [text.partition(delimiter)[0] for text in texts]
        else:
            cells = [
                parts[index] if len(parts := text.split(delimiter, index + 1)) > index else ""
                for text in texts
            ]
        return canonical.keys(cells)

    def digester(self) -> Callable[[str, str], bytes]:
        """digest(record digest, line text) -> the line digest (once the header is read)."""
        identity = self._lines.identity
        if identity is None:  # pragma: no cover - lines are handed over after the header
            raise RuntimeError("no header read yet")
        seed = "\x00".join(["skuferry line", LINE_DIGEST_VERSION, self._mapper.seed, identity])
        base = hashlib.blake2b(digest_size=16)
        # A fixed-length prefix: seed, record digest (32 hex digits) and text cannot run together.
        base.update(hashlib.blake2b(seed.encode("utf-8", "surrogatepass")).digest())
        copy = base.copy

        def digest(record_digest: str, text: str) -> bytes:
            hashed = copy()
            hashed.update((record_digest + text).encode("utf-8", "surrogatepass"))
            return hashed.digest()

        return digest

    def parse(self, line: int, text: str) -> list[RawRecord | BadRecord]:
        return self._lines.parse(line, text)

    def _key_index(self) -> int | None:
        if not self._indexed:
            header = self._lines.header or []
            column = self._key_column
            self._index = header.index(column) if column in header else None
            self._indexed = True
        return self._index


def line_route(source: Source, mapper: Mapper) -> LineRoute | None:
    """The route for ``source``, or None when it could plan anything but what today's
    record-by-record reading plans (see the module docstring)."""
    ready = source if isinstance(source, ReadySource) else None
    if ready is not None:
        source = ready.inner
    if type(source) is not CsvSource or not mapper.reads_columns_only:
        return None
    return LineRoute(source.lines(), mapper, mapper.key_column, ready)
