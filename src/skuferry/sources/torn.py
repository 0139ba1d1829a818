"""A record is whole or it is not read: a line format's torn end fails the pull.

An export cut short mid-record (a copy cut off, an ERP job still writing) ends
without the line break that ends every record of a line format (CSV, JSON Lines).
A cut inside the last field leaves a row with every column and a shortened value
(``687.70`` read as ``68``): nothing in the row shows it, only the missing line
break does. So the readers end the pull with ``SourceError`` (exit 3, nothing
planned or written) when the last line has no line break, exactly as a cut-short
``.gz`` fails: a torn export is never taken for a whole, shorter one.

Some exporters never write a final line break. ``final_newline = "optional"`` in
the table that reads the file (``[source]`` or a ``[[join]]``) says so, and the
last line is then read as a whole record. The error names the file, the last
line and that key; nothing is read until the user says so.
"""

from __future__ import annotations

from skuferry.config.schema import FinalNewline
from skuferry.errors import SourceError

_SHOWN = 60  # characters of the last line quoted in the error


def ends_line(text: str | bytes, first: str | None = None) -> bool:
    """Whether ``text`` (a physical line as a reader got it) ends with its line break.

    JSON Lines (bytes) end a line with LF. A CSV line may end with LF, CRLF or a lone
    CR (old Mac exports), but a file whose ``first`` line ends with LF (or CRLF) and
    whose last ends with a lone CR was cut between the CR and the LF.
    """
    if isinstance(text, bytes):
        return text.endswith(b"\n")
    if text.endswith("\n"):
        return True
    return text.endswith("\r") and not (first or "").endswith("\n")


def check_end(
    name: str,
    line: int,
    last: str | bytes | None,
    mode: FinalNewline,
    *,
    first: str | None = None,
) -> None:
    """Raise ``SourceError`` when the file's last line ``last`` (number ``line``) is torn.

    ``last`` is None for a file with no line at all (0 bytes): that is an empty
    export, which the run's empty-source guard refuses, not a torn one. ``first``:
    the file's first line, whose line break the others share (CSV).
    """
    if last is None or mode == "optional" or ends_line(last, first):
        return
    raise torn_error(name, line, last)


def torn_error(name: str, line: int, last: str | bytes) -> SourceError:
    text = last.decode("utf-8", "replace") if isinstance(last, bytes) else last
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    shown = text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."
    return SourceError(
        f"{name} line {line}: the file ends inside this line (no line break after "
        f"{shown!r}): the export looks cut short (a copy cut off, or still being "
        "written), so none of it is used: nothing is written and nothing is marked gone. "
        "If the exporter never ends its file with a line break, set "
        'final_newline = "optional" in the [source] (or [[join]]) table that reads it'
    )
