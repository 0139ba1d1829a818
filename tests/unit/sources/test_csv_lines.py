"""``CsvSource.lines()`` reads exactly what ``records()`` reads, with plain lines left as text.

Every file below is read both ways: ``records()`` (the reference) and ``lines()``, whose
``RawLines`` blocks are expanded by ``parse``. The two must be equal record for record
(line numbers, fields, reasons, the keys' fields of bad rows), on messy files: quotes,
quoted line breaks, unclosed quotes, CRLF, lone CR, a BOM, blank lines, rows too wide or
too short, undecodable bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skuferry.errors import SourceError
from skuferry.models import BadRecord, RawLines, RawRecord
from skuferry.sources.csv import CsvLines, CsvSource


def _expanded(lines: CsvLines) -> list[RawRecord | BadRecord]:
    out: list[RawRecord | BadRecord] = []
    for item in lines:
        if isinstance(item, RawLines):
            for number, text in enumerate(item.texts, start=item.start):
                assert '"' not in text
                out.extend(lines.parse(number, text))
        else:
            out.append(item)
    return out


def _same(path: Path, *, block: int = 3, delimiter: str = ",") -> CsvLines:
    source = CsvSource(path, delimiter=delimiter)
    reference = list(source.records())
    lines = source.lines(block=block)
    got = _expanded(lines)
    assert _shape(got) == _shape(reference)
    return lines


def _shape(records: list[RawRecord | BadRecord]) -> list[tuple[Any, ...]]:
    """Everything a record says, the bad ones' fields and guess included."""
    return [
        (r.line, r.fields, None, None, None)
        if isinstance(r, RawRecord)
        else (r.line, dict(r.fields or {}), r.reason, r.key, r.guessed)
        for r in records
    ]


def test_plain_lines_come_as_text_and_quoted_records_as_records(tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    path.write_bytes(
        b'SKU,Name,Price\r\nA,one,1\r\nB,"two, quoted",2\r\nC,three,3\r\n'
        b'D,"multi\r\nline",4\r\nE,five,5\r\n\r\nF,six\r\n'
    )
    lines = _same(path, block=2000)
    items = list(lines)
    kinds = [type(i).__name__ for i in items]
    assert kinds == ["RawLines", "RawRecord", "RawLines", "RawRecord", "RawLines"]
    first = items[0]
    assert isinstance(first, RawLines) and (first.start, first.texts) == (2, ["A,one,1\r\n"])
    last = items[-1]
    assert isinstance(last, RawLines) and last.start == 7
    assert last.texts == ["E,five,5\r\n", "\r\n", "F,six\r\n"]
    assert lines.identity == "csv|utf-8|,|SKU,Name,Price\r\n"


def test_the_identity_holds_the_header_line_as_written(tmp_path: Path) -> None:
    identities = []
    for raw in (b"SKU,Price\nA,1\n", b"SKU,Price\r\nA,1\r\n", b"\xef\xbb\xbfSKU,Price\nA,1\n",
                b'"SKU",Price\nA,1\n', b"Price,SKU\n1,A\n"):  # fmt: skip
        path = tmp_path / "c.csv"
        path.write_bytes(raw)
        identities.append(_same(path).identity)
    assert len(set(identities)) == len(identities)


def test_a_bad_header_fails_as_records_fails(tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    path.write_bytes(b'SKU,"Na"me\nA,1\n')
    with pytest.raises(SourceError, match="line 1: bad header"):
        list(CsvSource(path).records())
    with pytest.raises(SourceError, match="line 1: bad header"):
        list(CsvSource(path).lines())


_cell = st.one_of(
    st.sampled_from(["A", "B", "C", "", " ", "1.5", "x y", "é", "K\x00"]),
    st.sampled_from(['"q"', '"a,b"', '"l1\nl2"', '"l1\r\nl2"', '"un', 'x"y', '"a""b"', '"a"b']),
    st.sampled_from(["\xff", "\x80z"]),  # undecodable as utf-8 (written as latin-1 bytes)
)
_line = st.lists(_cell, min_size=0, max_size=5)
_break = st.sampled_from(["\n", "\r\n", "\r"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    header=st.sampled_from(["SKU,Name,Price", '"SKU",Name,Price', "\ufeffSKU,Name,Price", ""]),
    rows=st.lists(st.tuples(_line, _break), max_size=12),
    last_break=st.booleans(),
    block=st.sampled_from([1, 2, 5, 2000]),
)
def test_lines_read_what_records_read(
    tmp_path_factory: pytest.TempPathFactory,
    header: str,
    rows: list[tuple[list[str], str]],
    last_break: bool,
    block: int,
) -> None:
    text = (header + "\n" if header else "") + "".join(",".join(cells) + brk for cells, brk in rows)
    if not last_break:
        text = text.rstrip("\r\n")
    raw = text.encode("utf-8").replace("\xff".encode(), b"\xff").replace("\x80".encode(), b"\x80")
    path = tmp_path_factory.mktemp("csv") / "c.csv"
    path.write_bytes(raw)
    source = CsvSource(path)
    try:
        reference = list(source.records())
    except SourceError as exc:
        with pytest.raises(SourceError) as caught:
            list(source.lines(block=block))
        assert str(caught.value) == str(exc)
        return
    got = _expanded(source.lines(block=block))
    assert _shape(got) == _shape(reference)
