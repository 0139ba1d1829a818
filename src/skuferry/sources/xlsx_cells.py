"""What both xlsx readers share: a cell's value as a record holds it, and the row type.

``sources/xlsx.py`` (openpyxl) and ``sources/xlsx_calamine.py`` (calamine) both
import from here, never from each other's module, so neither depends on the other.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Protocol

from openpyxl.cell.cell import ERROR_CODES

from skuferry.errors import ConfigError
from skuferry.models import BadRecord

_MISSING: Any = object()
# What a cell shows when its formula failed (openpyxl gives the code as text; a text cell
# that reads exactly so is taken as one too: it is never a product's value either).
ERRORS = frozenset(ERROR_CODES)


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
