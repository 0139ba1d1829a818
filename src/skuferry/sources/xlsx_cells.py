"""What the xlsx source's readers share: a cell's value as a record holds it, the row
type, the compact shared-strings table.

The xlsx source and its openpyxl and calamine readers import from here, never from
each other's module, so there is no cycle; nothing here imports openpyxl.
"""

from __future__ import annotations

import datetime as dt
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from skuferry.errors import ConfigError
from skuferry.models import BadRecord
from skuferry.sources.xml import hardened_parser

_MISSING: Any = object()
# What a cell shows when its formula failed (openpyxl gives the code as text; a text cell
# that reads exactly so is taken as one too: it is never a product's value either).
# openpyxl's ERROR_CODES, written out so that a calamine run need not import openpyxl
# (the pin's tests check they are the same)
ERRORS = frozenset(("#NULL!", "#DIV/0!", "#VALUE!", "#REF!", "#NAME?", "#NUM!", "#N/A"))


class AmbiguousRow(dict[str, Any]):
    """A row of a sheet whose header repeats a name: looking that name up is an error."""

    __slots__ = ("_ambiguous",)

    def __init__(self, values: dict[str, Any], ambiguous: dict[str, str]) -> None:
        super().__init__(values)
        self._ambiguous = ambiguous  # name -> the message naming its columns

    def _refuse(self, key: object) -> None:
        if isinstance(key, str) and key in self._ambiguous:
            raise ConfigError([self._ambiguous[key]])

    def __missing__(self, key: str) -> Any:
        self._refuse(key)
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        value = super().get(key, _MISSING)
        if value is _MISSING:
            self._refuse(key)
            return default
        return value

    def __contains__(self, key: object) -> bool:
        if super().__contains__(key):
            return True
        self._refuse(key)
        return False


def cell_value(value: Any) -> Any:
    """A cell's value as a record holds it: dates and times become ISO text."""
    if isinstance(value, dt.datetime):
        if value.time() == dt.time(0) and value.tzinfo is None:
            return value.date().isoformat()
        return value.isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    return value


def filled(value: Any) -> bool:
    return value is not None and not (isinstance(value, str) and not value.strip())


def column_letter(index: int) -> str:
    """The letters of a 0-based column index: 0 -> A, 25 -> Z, 26 -> AA."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(65 + rest) + letters
    return letters


class SharedStrings(Sequence[str]):
    """An .xlsx shared-strings table kept as one UTF-8 buffer and an offset array.

    Excel stores every distinct text of a workbook once, in a table the rows
    index into; a reader must hold it all. openpyxl's own reader keeps a ``str``
    object per entry (and an XML element per entry while it parses); this keeps
    the bytes and 8 bytes of offset, a fraction of that for a catalog of
    distinct names.
    """

    def __init__(self) -> None:
        self._data = bytearray()
        self._ends = array("Q")

    def append(self, text: str) -> None:
        self._data += text.encode("utf-8", "surrogatepass")
        self._ends.append(len(self._data))

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, index: int) -> str:  # type: ignore[override]
        start = self._ends[index - 1] if index > 0 else 0
        return self._data[start : self._ends[index]].decode("utf-8", "surrogatepass")

    @classmethod
    def parse(cls, source: Any) -> SharedStrings:
        """Read ``xl/sharedStrings.xml``: each ``<si>``'s text runs, phonetic guides left out."""
        table = cls()
        parts: list[str] = []
        depth = {"si": 0, "t": 0, "rPh": 0}

        def start(name: str, _attrs: list[str]) -> None:
            local = name.rpartition("}")[2]
            if local in depth:
                depth[local] += 1
                if local == "si":
                    parts.clear()

        def end(name: str) -> None:
            local = name.rpartition("}")[2]
            if local in depth:
                depth[local] -= 1
                if local == "si":  # as openpyxl does: drop the _x005F_ escape of "_"
                    table.append("".join(parts).replace("x005F_", ""))

        def data(text: str) -> None:
            if depth["t"] and not depth["rPh"]:
                parts.append(text)

        parser = hardened_parser()
        parser.StartElementHandler, parser.EndElementHandler = start, end
        parser.CharacterDataHandler = data
        parser.ParseFile(source)
        return table


class SheetSource(Protocol):
    """What ``xlsx_calamine.read`` asks of the xlsx source (``XlsxSource``)."""

    path: Path
    header_row: int

    def _sheet(self, book: Any) -> Any: ...

    def _header(
        self, cells: tuple[Any, ...], title: str
    ) -> tuple[list[tuple[int, str]], dict[str, str]]: ...

    def _error_row(
        self, number: int, values: dict[str, Any], ambiguous: dict[str, str]
    ) -> BadRecord: ...

    def _repeated_header(self, number: int) -> BadRecord: ...


def repeats_header(values: dict[str, Any]) -> bool:
    """Every filled cell of a row (two or more) holds its own column's name: the header
    again (two sheets pasted one under the other), no product."""
    return len(values) >= 2 and all(type(v) is str and v.strip() == k for k, v in values.items())
