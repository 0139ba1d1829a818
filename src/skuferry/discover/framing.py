"""How an export's bytes are framed: encoding, delimiter and quoting, line ends, the
header row of a sheet, the repeating element of an XML file, the records and the
next link of a JSON answer. Pure functions of what the edge read; each says how sure.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from skuferry.discover import cut
from skuferry.discover.model import Finding, Sure
from skuferry.discover.values import present
from skuferry.sources import encodings

# --- encoding --------------------------------------------------------------------

# UTF-8 read as cp1252 and saved again: "Ã¼" for "ü", "Ã©" for "é"
_MOJIBAKE = re.compile("[\u00c3\u00c2][\u0080-\u00bf\u2018-\u203a\u0152-\u0178\u02c6\u02dc]")
_BOM_ENCODINGS = {"utf-8-sig": "utf-8", "utf-16": "utf-16", "utf-32": "utf-32"}


def encoding(head: bytes, *, complete: bool) -> tuple[str, Finding, list[str]]:
    """The encoding of a text export from its first bytes: (name, finding, notes).

    The decision is the sources' own (``encodings.detect``: what ``encoding = "auto"``
    reads by); this says how sure it is, in init's words. A BOM is sure; UTF-8 with
    non-ASCII text is sure; plain ASCII is read as UTF-8 (likely: a later line may say
    otherwise); bytes that are not UTF-8 but are cp1252 (a Windows ERP's export) are
    likely cp1252, named by example.
    """
    found = encodings.detect(head, whole=complete)
    if found.encoding in _BOM_ENCODINGS:
        name = _BOM_ENCODINGS[found.encoding]
        skipped = " (skipped when read)" if found.encoding == "utf-8-sig" else ""
        return name, Finding("encoding", name, "sure", found.evidence + skipped), []
    if encodings.single_byte(found.encoding):
        return _not_utf8(head)
    text = head.decode("utf-8", "replace")
    notes = []
    odd = _MOJIBAKE.search(text)
    if odd:
        notes.append(
            f"the text holds {odd.group()!r}, which is how UTF-8 looks after being read as "
            "cp1252 and saved again (a double-encoded export): skuferry sends it as "
            "written; fix the exporter's encoding"
        )
    if found.invalid:
        notes.append(
            f"{found.invalid} line(s) of the sample are not UTF-8 in a UTF-8 file: "
            "they are refused as bad rows, with their line"
        )
    if found.utf8_line is None:
        why = "the sample is plain ASCII; any later non-ASCII byte must be UTF-8"
        return "utf-8", Finding("encoding", "utf-8", "likely", why), notes
    example = next(c for c in text if not c.isascii() and c != "\ufffd")
    why = f"every byte of the sample is valid UTF-8 (e.g. {example!r})"
    if found.invalid:
        why = f"{found.evidence} (e.g. {example!r})"
    return "utf-8", Finding("encoding", "utf-8", "sure", why), notes


def _not_utf8(head: bytes) -> tuple[str, Finding, list[str]]:
    """Bytes the sources read single-byte: cp1252, named by the first byte that is no
    UTF-8; latin-1 (unsure) when not even cp1252 reads them."""
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = exc.start
    else:  # pragma: no cover - detect found a line that is no UTF-8
        at = 0
    byte = head[at : at + 1]
    try:
        shown = byte.decode("cp1252")
        head.decode("cp1252")
    except UnicodeDecodeError:
        why = f"byte 0x{byte.hex().upper()} at {at} is neither UTF-8 nor cp1252"
        return (
            "latin-1",
            Finding("encoding", "latin-1", "unsure", why),
            ["latin-1 reads any byte, but the letters may be wrong: check the sample below"],
        )
    why = f"byte 0x{byte.hex().upper()} at {at} is not UTF-8; as cp1252 (Windows) it is {shown!r}"
    return "cp1252", Finding("encoding", "cp1252", "likely", why), []


# --- delimited text ------------------------------------------------------------------

DELIMITERS = (",", ";", "\t", "|")
_SHOWN = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}


@dataclass(frozen=True, slots=True)
class Dialect:
    """How a delimited text is written: its delimiter, quoting, line ends, header line."""

    delimiter: str
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]
    final_newline: bool  # the text ends with a line break (only known for a whole file)
    header_line: int  # 1-based line of the header as the rows suggest


def whole_lines(text: str, *, complete: bool) -> str:
    """``text`` without its last record when that may be cut short (a sample's end): up to
    the last line break outside quotes (``cut.csv_text``)."""
    return text if complete else cut.csv_text(text)


def _rows(text: str, delimiter: str, limit: int = 200) -> list[list[str]] | None:
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    rows = []
    try:
        for row in reader:
            if row:
                rows.append(row)
            if len(rows) >= limit:
                break
    except csv.Error:
        return None
    return rows


def dialect(text: str, *, complete: bool) -> Dialect:
    """The delimiter (the one that cuts every row into as many fields as the header),
    the quoting, the line ends, and where the header is."""
    body = whole_lines(text.removeprefix("\ufeff"), complete=complete)
    scores: list[tuple[float, int, str]] = []
    for delimiter in DELIMITERS:
        rows = _rows(body, delimiter)
        if not rows:
            continue
        widths = Counter(len(r) for r in rows)
        width, count = widths.most_common(1)[0]
        if width < 2:
            continue
        scores.append((count / len(rows), width, delimiter))
    scores.sort(reverse=True)
    findings: list[Finding] = []
    notes: list[str] = []
    if not scores:
        delimiter = ","
        findings.append(
            Finding("delimiter", "comma", "unsure", "no delimiter splits the lines: one column?")
        )
    else:
        share, width, delimiter = scores[0]
        rivals = [s for s in scores[1:] if s[0] >= share - 0.02 and s[0] > 0.9]
        sure: Sure = "sure" if share > 0.98 and not rivals else "likely"
        why = f"it cuts {share:.0%} of the sampled rows into {width} fields"
        if rivals:
            other = _SHOWN[rivals[0][2]]
            why += f"; the {other} cuts as many rows into {rivals[0][1]}"
        findings.append(Finding("delimiter", _SHOWN[delimiter], sure, why))
    rows = _rows(body, delimiter) or []
    findings.append(_quoting(body, delimiter))
    findings.append(_line_ends(body))
    header = _header_line(rows)
    if header > 1:
        notes.append(
            f"the header looks like row {header} (the rows above it are shorter): the csv "
            "source reads the first line as the header; remove the lines above it"
        )
    ends = not complete or text.endswith(("\n", "\r"))
    return Dialect(delimiter, tuple(findings), tuple(notes), ends, header)


def _quoting(text: str, delimiter: str) -> Finding:
    """Whether cells are quoted, and what the quotes hold (delimiters, line breaks)."""
    d = re.escape(delimiter)
    quoted = re.findall(rf'(?:^|{d})"((?:[^"]|"")*)"(?={d}|\r?\n|$)', text, flags=re.MULTILINE)
    if not quoted:
        if "'" + delimiter in text and delimiter + "'" in text:
            return Finding(
                "quoting",
                "none seen",
                "unsure",
                "some cells start and end with ' : the csv source quotes with \" only",
            )
        return Finding("quoting", "none seen", "sure", 'no cell is quoted ("...")')
    held = []
    if any(delimiter in q for q in quoted):
        held.append("delimiters")
    if any("\n" in q or "\r" in q for q in quoted):
        held.append("line breaks")
    if any('""' in q for q in quoted):
        held.append("doubled quotes")
    what = f"; quoted cells hold {', '.join(held)}" if held else ""
    return Finding("quoting", 'double quotes (")', "sure", f"{len(quoted)} quoted cells{what}")


def _line_ends(text: str) -> Finding:
    crlf = text.count("\r\n")
    lf = text.count("\n") - crlf
    value = "CRLF (Windows)" if crlf > lf else "LF"
    return Finding("line ends", value, "sure", f"{crlf} CRLF, {lf} LF in the sample")


def _header_line(rows: Sequence[Sequence[str]]) -> int:
    """The 1-based row the header is on: the first row as wide as the rows below it."""
    if len(rows) < 2:
        return 1
    widths = Counter(len(r) for r in rows[1:])
    width = widths.most_common(1)[0][0]
    for number, row in enumerate(rows[:10], start=1):
        if len(row) == width and sum(1 for c in row if c.strip()) >= min(2, width):
            return number
    return 1


def header_problems(names: Sequence[str]) -> list[str]:
    """What is wrong with a header: empty names, names given twice."""
    problems = []
    empty = [str(i) for i, n in enumerate(names, start=1) if not str(n).strip()]
    if empty:
        problems.append(
            f"header cells {', '.join(empty[:5])} are empty: those columns are not read"
        )
    twice = sorted(n for n, c in Counter(str(n).strip() for n in names).items() if c > 1 and n)
    if twice:
        problems.append(
            f"the header names {', '.join(map(repr, twice[:5]))} more than once: a mapping "
            "cannot read those columns (skuferry will not guess which one was meant)"
        )
    return problems


# --- sheets ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Table:
    """Where a workbook's products are: the sheet, the header row, what was skipped."""

    sheet: str
    position: int  # 1-based
    header_row: int  # 1-based
    findings: tuple[Finding, ...]


def _filled(row: Sequence[Any]) -> list[Any]:
    return present(row)


def sheet_table(sheets: Sequence[tuple[str, Sequence[Sequence[Any]]]]) -> Table | None:
    """The sheet holding the products and its header row, from each sheet's first rows.

    The header is the first row of at least two text cells, all different, as wide as
    the rows below it; rows above it (a title, a date, notes) are left out. The sheet
    is the one with the most rows below such a header (instructions and macro sheets
    have few).
    """
    best: tuple[int, int, str, int] | None = None  # (rows, -position, name, header_row)
    for position, (name, rows) in enumerate(sheets, start=1):
        header = _sheet_header(rows)
        if header is None:
            continue
        below = sum(1 for row in rows[header:] if len(_filled(row)) >= 2)
        if best is None or (below, -position) > best[:2]:
            best = (below, -position, name, header)
    if best is None:
        return None
    below, neg, name, header = best
    position = -neg
    findings = []
    others = [n for n, _ in sheets if n != name]
    why = f"{below} rows of data below its header in the first rows read"
    if others:
        why += f"; the other sheets ({', '.join(map(repr, others[:4]))}) hold fewer"
    findings.append(
        Finding("sheet", f"{name!r} (sheet {position})", "sure" if below else "unsure", why)
    )
    rows = dict(sheets)[name]
    above = [_filled(r) for r in rows[: header - 1] if _filled(r)]
    hwhy = "the first row of column names as wide as the rows below it"
    if above:
        hwhy += f"; above it: {', '.join(repr(str(c[0])) for c in above[:2])} (a title, left out)"
    findings.append(Finding("header row", str(header), "sure" if below else "unsure", hwhy))
    return Table(name, position, header, tuple(findings))


def _sheet_header(rows: Sequence[Sequence[Any]]) -> int | None:
    widths = [len(_filled(r)) for r in rows]
    for index, row in enumerate(rows[:15]):
        cells = _filled(row)
        if len(cells) < 2 or not all(isinstance(c, str) for c in cells):
            continue
        if len({str(c).strip() for c in cells}) != len(cells):
            continue
        below = [w for w in widths[index + 1 :] if w]
        if not below:
            return index + 1
        if len(cells) >= 0.6 * max(below):
            return index + 1
    return None


# --- XML ---------------------------------------------------------------------------------


@dataclass
class ElementStats:
    """What the edge counted of one element path while scanning an XML file's start."""

    count: int = 0
    structured: int = 0  # instances with child elements or attributes


def record_element(paths: Mapping[tuple[str, ...], ElementStats]) -> tuple[str, Finding] | None:
    """The element that repeats once per product: among the elements that repeat and
    hold children or attributes, the one nearest the root (BMEcat: ``ARTICLE``, not
    its ``FEATURE``s)."""
    repeating = [
        (len(path), -stats.count, path)
        for path, stats in paths.items()
        if stats.count >= 2 and stats.structured >= stats.count / 2
    ]
    if not repeating:
        single = [(len(p), p) for p, s in paths.items() if s.structured and len(p) > 1]
        if not single:
            return None
        _, path = min(single)
        why = "only one record in the sample: the first element below the root with children"
        return path[-1], Finding("record element", path[-1], "unsure", why)
    repeating.sort()
    depth, neg, path = repeating[0]
    same_depth = [r for r in repeating if r[0] == depth and r[2] != path]
    why = f"<{path[-1]}> repeats {-neg} times at {'/'.join(path)}"
    sure: Sure = "sure"
    if same_depth:
        other = same_depth[0][2][-1]
        why += f"; <{other}> repeats at the same depth too"
        sure = "likely"
    return path[-1], Finding("record element", path[-1], sure, why)


# --- JSON answers --------------------------------------------------------------------------

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def member(name: str) -> str:
    """A member name as a JMESPath identifier (quoted when it is not a plain name)."""
    if _IDENTIFIER.fullmatch(name):
        return name
    escaped = name.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def dotted(names: Sequence[str]) -> str:
    return ".".join(member(n) for n in names)


def _object_lists(
    value: Any, path: tuple[str, ...], depth: int
) -> list[tuple[tuple[str, ...], int, str]]:
    """(path, items, suffix) of every list of objects within ``depth`` levels."""
    found = []
    if isinstance(value, list):
        objects = [v for v in value if isinstance(v, dict)]
        if objects and len(objects) == len(value):
            nodes = [v.get("node") for v in objects]
            if all(isinstance(n, dict) for n in nodes) and all(len(v) <= 2 for v in objects):
                found.append((path, len(value), "[].node"))  # GraphQL edges
            else:
                found.append((path, len(value), ""))
        return found
    if isinstance(value, dict) and depth > 0:
        for name, inner in value.items():
            found.extend(_object_lists(inner, (*path, name), depth - 1))
    return found


def records_path(body: Any) -> tuple[str, Finding] | None:
    """Where a JSON answer holds its records: the JMESPath of the longest list of objects
    (``""``: the answer is the list itself)."""
    if isinstance(body, list):
        if body and all(isinstance(v, dict) for v in body):
            why = f"the answer is a list of {len(body)} objects"
            return "", Finding("records", "the answer itself", "sure", why)
        return None
    lists = _object_lists(body, (), 4)
    if not lists:
        return None
    lists.sort(key=lambda f: (-f[1], len(f[0])))
    path, items, suffix = lists[0]
    jmes = dotted(path) + suffix
    rivals = [f for f in lists[1:] if f[1] == items]
    sure: Sure = "likely" if rivals else "sure"
    why = f"the longest list of objects in the answer ({items} items)"
    if rivals:
        why += f"; {dotted(rivals[0][0])} is as long"
    return jmes, Finding("records", jmes, sure, why)


_NEXT_NAMES = (
    "next",
    "nextlink",
    "next link",
    "next page",
    "next url",
    "next href",
    "odata nextlink",
)


def next_link(body: Any) -> tuple[str, Finding] | None:
    """The JMESPath of the next page's address in a JSON answer, if it names one."""
    if not isinstance(body, dict):
        return None
    found = _find_next(body, (), 3)
    if found is None:
        return None
    path, value = found
    jmes = dotted(path)
    return jmes, Finding("next page", jmes, "sure", f"the answer links the next page ({value})")


def _find_next(value: Any, path: tuple[str, ...], depth: int) -> tuple[tuple[str, ...], str] | None:
    if not isinstance(value, dict) or depth < 0:
        return None
    for name, inner in value.items():
        plain = re.sub(r"[^a-z]+", " ", re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name).lower()).strip()
        if plain in _NEXT_NAMES or plain.endswith(" nextlink") or plain.endswith("next link"):
            if isinstance(inner, str) and _linkish(inner):
                return (*path, name), _short(inner)
            if isinstance(inner, dict) and isinstance(inner.get("href"), str):
                return (*path, name, "href"), _short(inner["href"])
    for name, inner in value.items():
        if isinstance(inner, dict):
            found = _find_next(inner, (*path, name), depth - 1)
            if found is not None:
                return found
    return None


def _linkish(text: str) -> bool:
    return text.startswith(("http://", "https://", "/", "?"))


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


_TOTAL_NAMES = (
    "total",
    "total count",
    "totalcount",
    "count",
    "total items",
    "odata count",
    "total results",
)
_PAGES_NAMES = ("pages", "total pages", "totalpages", "page count", "last page")


def totals(body: Any) -> dict[str, str]:
    """``total_path`` / ``total_pages_path`` for the counts a JSON answer announces."""
    out: dict[str, str] = {}
    if not isinstance(body, dict):
        return out
    for path, value in _scalars(body, (), 2):
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        name = re.sub(
            r"[^a-z]+", " ", re.sub(r"(?<=[a-z])(?=[A-Z])", " ", path[-1]).lower()
        ).strip()
        if name in _TOTAL_NAMES and "total_path" not in out:
            out["total_path"] = dotted(path)
        elif name in _PAGES_NAMES and "total_pages_path" not in out:
            out["total_pages_path"] = dotted(path)
    return out


def _scalars(
    value: dict[str, Any], path: tuple[str, ...], depth: int
) -> list[tuple[tuple[str, ...], Any]]:
    found: list[tuple[tuple[str, ...], Any]] = []
    for name, inner in value.items():
        if isinstance(inner, dict) and depth > 0:
            found.extend(_scalars(inner, (*path, name), depth - 1))
        elif not isinstance(inner, list | dict):
            found.append(((*path, name), inner))
    return found


# --- the file's format ----------------------------------------------------------------

_EXTENSIONS = {
    ".csv": "csv", ".txt": "csv", ".tsv": "csv", ".tab": "csv",
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json",
    ".xml": "xml", ".xlsx": "xlsx", ".xlsm": "xlsx",
}  # fmt: skip


def format_of(name: str, head: bytes) -> tuple[str, Finding]:
    """``csv``, ``jsonl``, ``xml``, ``xlsx`` or ``json`` (a JSON document, not JSON Lines),
    from the file's name (without ``.gz``) and, when that says nothing, its first bytes."""
    lower = name.lower()
    suffix = lower[lower.rfind(".") :] if "." in lower else ""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    by_content = "csv"
    if text.startswith(b"<"):
        by_content = "xml"
    elif text.startswith(b"{"):
        by_content = "jsonl"
    elif text.startswith(b"["):
        by_content = "json"
    elif head.startswith(b"PK\x03\x04"):
        by_content = "xlsx"
    found = _EXTENSIONS.get(suffix)
    if found == "json" and by_content == "jsonl":
        found = "jsonl"  # one object per line under a .json name
    if found is None:
        return by_content, Finding("format", by_content, "likely", "by its first bytes")
    if found != by_content and found in ("jsonl", "xml"):
        why = f"named {suffix} but its first bytes look like {by_content}"
        return by_content, Finding("format", by_content, "likely", why)
    return found, Finding("format", found, "sure", f"named {suffix}, and its content agrees")


# --- what answers at a URL: an export file or a JSON API -------------------------------

Served = Literal["file", "api", "page"]

_JSON_LINES_TYPES = frozenset({
    "application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonl",
    "application/jsonlines", "application/x-jsonlines", "application/json-lines",
})  # fmt: skip
_FILE_TYPES = frozenset({
    "application/gzip", "application/x-gzip", "application/zip", "application/x-zip-compressed",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "application/vnd.ms-excel", "application/xml", "application/csv", "application/x-csv",
})  # fmt: skip
_SAYS_NOTHING = frozenset({"", "application/octet-stream", "binary/octet-stream"})
_PACKED_NAMES = (".gz", ".zip")
_KIND_WORDS = {"file": "an export file", "api": "a JSON API", "page": "an HTML page"}
_PAGE = re.compile(rb"<(!doctype\s+html|html[\s>]|head[\s>]|body[\s>])", re.IGNORECASE)


def served_as(
    name: str, content_type: str | None, head: bytes, *, packed: str
) -> tuple[Served, Finding]:
    """What answers at a URL: an export ``file``, a JSON ``api``, or an HTML ``page`` (a
    sign-in or download page), and how sure.

    ``name`` is the URL's last path segment, ``content_type`` the answer's Content-Type
    (None over SFTP), ``head`` the content's first bytes (decompressed), ``packed`` what
    its own first bytes are (``gzip``, ``zip`` or ``plain``). The content decides; the
    Content-Type and the name make it sure when they agree, and are said when they do not.
    """
    media = (content_type or "").split(";")[0].strip().lower()
    by_content, seen = _by_content(head, packed)
    by_type = _by_type(media)
    by_name = _by_name(name)
    lines_named = media in _JSON_LINES_TYPES or name.lower().endswith((".jsonl", ".ndjson"))
    if by_content == "api" and lines_named and _one_object_line(head):
        # one JSON object on its one line: a JSON Lines file the type or name announces
        by_content, seen = "file", "one JSON object on a line"
    votes = ((f"its Content-Type {media}", by_type), (f"its name {name!r}", by_name))
    agree = [what for what, kind in votes if kind == by_content]
    disagree = [(what, kind) for what, kind in votes if kind is not None and kind != by_content]
    if disagree:
        sure: Sure = "likely" if agree else "unsure"
        what, kind = disagree[0]
        why = f"its first bytes are {seen}, though {what} says {_KIND_WORDS[kind]}"
    elif agree:
        sure = "sure"
        says = "say" if len(agree) > 1 else "says"
        why = f"{' and '.join(agree)} {says} so, and its first bytes are {seen}"
    else:
        sure = "likely"
        why = f"its first bytes are {seen} (nothing else says what it is)"
    return by_content, Finding("served as", _KIND_WORDS[by_content], sure, why)


def _by_content(head: bytes, packed: str) -> tuple[Served, str]:
    if packed in ("gzip", "zip"):
        return "file", f"a {packed} archive's"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if _PAGE.match(text):
        return "page", "HTML"
    if text.startswith(b"<"):
        return "file", "XML"
    if text.startswith(b"["):
        return "api", "one JSON document (a list)"
    if text.startswith(b"{"):
        if _json_lines(text):
            return "file", "JSON Lines (one object per line)"
        return "api", "one JSON document (an object)"
    return "file", "text (not JSON, not markup)"


def _by_type(media: str) -> Served | None:
    if media in _SAYS_NOTHING:
        return None
    if media in _JSON_LINES_TYPES:
        return "file"
    if media in ("application/json", "text/json") or media.endswith("+json"):
        return "api"
    if media in ("text/html", "application/xhtml+xml"):
        return "page"
    if media in _FILE_TYPES or media.startswith("text/") or media.endswith("+xml"):
        return "file"
    return None


def _by_name(name: str) -> Served | None:
    lower = name.lower()
    for packing in _PACKED_NAMES:
        if lower.endswith(packing):
            return "file"
    suffix = lower[lower.rfind(".") :] if "." in lower else ""
    found = _EXTENSIONS.get(suffix)
    return "file" if found not in (None, "json") else None


def _json_lines(text: bytes) -> bool:
    """Two or more lines, the first one JSON object, the next starting another."""
    first, newline, rest = text.partition(b"\n")
    return bool(newline) and _one_object_line(first) and rest.lstrip(b"\r\n \t")[:1] == b"{"


def _one_object_line(text: bytes) -> bool:
    line = text.split(b"\n", 1)[0].strip()
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False
