"""A sample cut where its download stopped, made whole again: the records it holds in
full are kept, the one the cut went through is dropped, so the file sources read the
sample as they read a whole file (no torn last line, no unclosed element).

Pure functions of bytes. A UTF-16 text (its byte-order mark says so) is cut as text; any
other encoding skuferry reads is ASCII-compatible, so quotes, line breaks and tags are
found byte by byte.
"""

from __future__ import annotations

import codecs
import contextlib
import re
from collections.abc import Callable
from typing import Any

from skuferry.sources.xml import hardened_parser

_UTF16 = ((codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


def csv_records(content: bytes, *, quote: str = '"') -> bytes:
    """``content`` up to the end of its last whole record (``csv_text``)."""
    return _as_text(content, lambda text: csv_text(text, quote=quote))


def csv_text(text: str, *, quote: str = '"') -> str:
    """``text`` up to its last line break outside quotes: a quoted cell may hold line
    breaks and doubled quotes, and each quote turns quoting on or off, as RFC 4180 writes
    it (Excel, every ERP's CSV writer). A stray quote inside an unquoted cell (``24"``)
    throws that count off: when the quote-aware cut would keep less than half of the
    text, the cut is at the last line break instead."""
    inside = False
    end = 0
    for found in re.finditer(f"[{re.escape(quote)}\r\n]", text):
        if found.group() == quote:
            inside = not inside
        elif not inside:
            end = found.end()
    if end * 2 < len(text):
        end = max(end, text.rfind("\n") + 1, text.rfind("\r") + 1)
    return text[:end]


def lines(content: bytes) -> bytes:
    """``content`` up to its last line break (JSON Lines: one record per line)."""
    return _as_text(content, lambda text: text[: text.rfind("\n") + 1])


def _as_text(content: bytes, cut: Callable[[str], str]) -> bytes:
    for bom, codec in _UTF16:
        if content.startswith(bom):
            body = content[len(bom) :]
            text = body[: len(body) - len(body) % 2].decode(codec, errors="ignore")
            return bom + cut(text).encode(codec)
    # ASCII-compatible: a quote, a line break is one byte and never inside another character
    return cut(content.decode("latin-1")).encode("latin-1")


_QNAME = re.compile(rb"<([^\s/>]+)")


def xml_records(content: bytes, record: str) -> bytes:
    """``content`` up to the end of its last whole ``record`` element (the local name the
    sample's records are), its open ancestors closed after it as they were opened.

    ``content`` itself when no whole record is found (the reader then says why).
    """
    parser: Any = hardened_parser()
    stack: list[bytes] = []  # the qualified names as written (with their prefixes)
    depth: int | None = None  # the records' depth, from the first one closed
    best: tuple[int, tuple[bytes, ...]] | None = None

    def start(_name: str, _attrs: list[str]) -> None:
        found = _QNAME.match(content, parser.CurrentByteIndex)
        stack.append(found.group(1) if found else b"")

    def end(name: str) -> None:
        nonlocal depth, best
        at = parser.CurrentByteIndex
        stack.pop()
        if name.rpartition("}")[2] != record or (depth is not None and len(stack) != depth):
            return
        depth = len(stack)
        close = content.find(b">", at)
        if close >= 0:
            best = (close + 1, tuple(stack))

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.buffer_text = False
    with contextlib.suppress(Exception):  # the cut itself, or worse: what was read counts
        parser.Parse(content, False)
    if best is None:
        return content
    stop, ancestors = best
    closing = b"".join(b"</" + name + b">" for name in reversed(ancestors))
    return content[:stop] + closing + b"\n"
