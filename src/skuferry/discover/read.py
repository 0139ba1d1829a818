"""The edge ``init`` reads through: a sample of the file or API, never all of a big one.

First the framing, from the start of the file (its first MiB, decompressed), the first
rows of each sheet, the start of an XML file, or the first page of an API. Then the
first records through the very source a sync uses (``open_source``, configured as
found), so that what is proposed is read exactly as the sync will read it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from skuferry.config.load import settings_from_dict
from skuferry.config.schema import Settings
from skuferry.discover import framing
from skuferry.discover.known import PRESET_CREDENTIALS
from skuferry.discover.model import Finding, Sample
from skuferry.discover.render import SANDBOX_URL
from skuferry.errors import ConfigError, SourceError, UsageError
from skuferry.models import BadRecord, RawRecord
from skuferry.net.paths import url_scheme
from skuferry.sources import compression
from skuferry.sources.dispatch import open_source
from skuferry.sources.xml import RefusedEntityError, hardened_parser

HEAD_BYTES = 1 << 20  # the framing is read from the first MiB (decompressed)
XML_HEAD_BYTES = 4 << 20
SHEET_ROWS = 40  # rows of each sheet read for its header
SAMPLE_RECORDS = 500  # the records read through the source
PLACEHOLDER_KEY = "init-placeholder"  # the loader wants a CMS key; this one is never sent
_KEY_ENV = "SKUFERRY_API_KEY"


def load(data: Mapping[str, Any], *, folder: Path, env: Mapping[str, str], origin: str) -> Settings:
    """``data`` validated by the config loader, as if it were the file ``origin`` in
    ``folder``. Without ``SKUFERRY_API_KEY`` a placeholder stands in (the key is the CMS's,
    and nothing here talks to the CMS)."""
    environ = dict(env)
    if not environ.get(_KEY_ENV, "").strip():
        environ[_KEY_ENV] = PLACEHOLDER_KEY
    return settings_from_dict(data, origin=origin, base_dir=folder, env=environ)


def _config(source: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    return {
        "api": {"base_url": SANDBOX_URL},
        "source": dict(source),
        "state": {"path": str(folder / ".skuferry-init.db")},  # never opened here
    }


def relative(path: Path, folder: Path) -> str:
    """``path`` as the config writes it: relative to its folder when below it."""
    full = path.expanduser().absolute()
    try:
        return str(full.relative_to(folder.absolute()))
    except ValueError:
        return str(full)


def sample(
    origin: str,
    *,
    folder: Path,
    env: Mapping[str, str],
    preset: str | None = None,
    given: Mapping[str, Any] | None = None,
    limit: int = SAMPLE_RECORDS,
) -> Sample:
    """A sample of the export or API ``origin`` (a path, or an http(s) URL).

    ``folder`` is where the config goes (paths are written relative to it); ``given``
    holds keys of the ``[source]`` table the user gave (a preset's client id).
    """
    if url_scheme(origin) in ("http", "https"):
        if preset is not None:
            return _api_preset(origin, preset, folder=folder, env=env, given=given, limit=limit)
        return _api(origin, folder=folder, env=env, limit=limit)
    if preset is not None:
        raise UsageError(f"--preset {preset} reads the system's API: --from must be its URL")
    path = Path(origin).expanduser()
    if not path.is_file():
        raise UsageError(f"--from {origin}: no such file")
    return _file(path, folder=folder, env=env, limit=limit)


# --- files ------------------------------------------------------------------------------


def _head(path: Path, size: int) -> tuple[bytes, bool]:
    """The first ``size`` bytes of the content (decompressed), and whether that is all."""
    try:
        with compression.open_binary(path) as handle:
            head = handle.read(size + 1)
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc}") from exc
    return head[:size], len(head) <= size


def _inner_name(path: Path) -> str:
    """The name of the content: without ``.gz``, or the member of a one-file zip."""
    kind = compression.sniff(path)
    if kind == "gzip":
        return path.name.removesuffix(".gz").removesuffix(".GZ")
    if kind == "zip":
        with zipfile.ZipFile(path) as archive:
            names = [i.filename for i in archive.infolist() if not i.is_dir()]
        return names[0] if len(names) == 1 else path.name
    return path.name


def _file(path: Path, *, folder: Path, env: Mapping[str, str], limit: int) -> Sample:
    written = relative(path, folder)
    findings: list[Finding] = []
    notes: list[str] = []
    if compression.sniff(path) == "zip" and compression.is_xlsx(path):
        fmt = "xlsx"
        findings.append(Finding("format", "xlsx", "sure", "an Excel workbook"))
    else:
        name = _inner_name(path)
        head, complete = _head(path, HEAD_BYTES)
        fmt, found = framing.format_of(name, head)
        findings.append(found)
        if compression.sniff(path) != "plain":
            findings.append(
                Finding("compression", compression.sniff(path), "sure", "read as it streams")
            )
    table: dict[str, Any] = {"type": fmt, "path": written}
    if fmt == "json":
        raise UsageError(
            f"{path} is one JSON document, not JSON Lines (one object per line): skuferry "
            "reads JSON Lines, or the document from an API URL; convert it with "
            f"`jq -c '.[]' {path.name} > {path.stem}.jsonl` and run init on that"
        )
    if fmt in ("csv", "jsonl"):
        name, found, said = framing.encoding(head, complete=complete)
        findings.append(found)
        notes.extend(said)
        table["encoding"] = name
        text = head.decode(name, errors="replace")
    if fmt == "csv":
        dialect = framing.dialect(text, complete=complete)
        findings.extend(dialect.findings)
        notes.extend(dialect.notes)
        table["delimiter"] = dialect.delimiter
        if not dialect.final_newline:
            table["final_newline"] = "optional"
    if fmt == "jsonl" and complete and not text.endswith(("\n", "\r")):
        table["final_newline"] = "optional"
    if fmt == "xlsx":
        found_table = _sheet(path)
        findings.extend(found_table.findings)
        table["sheet"] = found_table.sheet
        table["header_row"] = found_table.header_row
    if fmt == "xml":
        element = _record_element(path)
        if element is None:
            raise UsageError(f"{path}: no element repeats in its first {XML_HEAD_BYTES >> 20} MiB")
        table["record"], found = element
        findings.append(found)
    return _through_source(table, folder=folder, env=env, limit=limit, findings=findings,
                           notes=notes, origin=str(path))  # fmt: skip


def _sheet(path: Path) -> framing.Table:
    """The products' sheet and header row, from the first rows of every sheet."""
    from openpyxl import load_workbook

    with (
        tempfile.TemporaryDirectory(prefix="skuferry-init-") as scratch,
        compression.as_plain_file(path, Path(scratch) / "workbook.xlsx") as plain,
    ):
        book = load_workbook(plain, read_only=True, data_only=True)
        try:
            sheets = [
                (ws.title, [list(r) for r in ws.iter_rows(max_row=SHEET_ROWS, values_only=True)])
                for ws in book.worksheets
            ]
        finally:
            book.close()
    found = framing.sheet_table(sheets)
    if found is None:
        raise UsageError(f"{path}: no sheet has a header row (two or more named columns)")
    return found


def _record_element(path: Path) -> tuple[str, Finding] | None:
    """The repeating element, from the element paths in the file's first MiBs."""
    stats: dict[tuple[str, ...], framing.ElementStats] = {}
    stack: list[list[Any]] = []  # [path, counted as structured]
    parser = hardened_parser()

    def start(name: str, attrs: list[str]) -> None:
        if stack and not stack[-1][1]:  # the parent has a child: structured, once
            stats[stack[-1][0]].structured += 1
            stack[-1][1] = True
        at = (*(stack[-1][0] if stack else ()), name.rpartition("}")[2])
        entry = stats.setdefault(at, framing.ElementStats())
        entry.count += 1
        if attrs:
            entry.structured += 1
        stack.append([at, bool(attrs)])

    def end(_name: str) -> None:
        stack.pop()

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        with compression.open_binary(path) as handle:
            fed = 0
            while fed < XML_HEAD_BYTES:
                chunk = handle.read(1 << 16)
                if not chunk:
                    break
                parser.Parse(chunk, False)
                fed += len(chunk)
    except RefusedEntityError as exc:
        raise SourceError(f"{path}: {exc}; refused (entities are never expanded)") from None
    except Exception as exc:  # noqa: BLE001 - expat's error: what was read still counts
        if not stats:
            raise SourceError(f"{path}: not well-formed XML ({exc})") from None
    return framing.record_element(stats)


# --- APIs ---------------------------------------------------------------------------------


def _api(url: str, *, folder: Path, env: Mapping[str, str], limit: int) -> Sample:
    """A JSON API: its first answer tells where the records are and how the pages link."""
    probe = {"type": "http", "url": url, "items_path": "[@]", "pagination": "none"}
    settings = load(_config(probe, folder), folder=folder, env=env, origin="init")
    source = open_source(settings.source)
    try:
        with closing(source.records()) as records:
            first = next(records, None)
    except SourceError as exc:
        raise UsageError(
            f"{url} did not answer as a JSON API ({exc}); an export file at a URL: "
            "download it and run init on the file; an API that asks for credentials: "
            "--preset NAME for a known system, or write [source] auth by hand "
            "(docs/sources/http.md)"
        ) from exc
    body = first.fields if isinstance(first, RawRecord) else None
    found = framing.records_path(body)
    if found is None:
        raise UsageError(f"{url}: its answer holds no list of records (objects)")
    items_path, finding = found
    findings = [Finding("format", "a JSON API", "sure", "the URL answers JSON"), finding]
    notes: list[str] = []
    table: dict[str, Any] = {"type": "http", "url": url, "items_path": items_path}
    link = framing.next_link(body)
    if link is not None:
        table["pagination"] = "next_link"
        table["next_path"], found_link = link
        findings.append(found_link)
    else:
        findings.append(
            Finding("next page", "none named", "unsure", "the first answer links no next page")
        )
        notes.append(
            "the first answer names no next page (and a Link header, if the API sends one, "
            "is followed): if the API pages by number or offset, set pagination by hand "
            "(docs/sources/http.md)"
        )
    table.update(framing.totals(body))
    return _through_source(table, folder=folder, env=env, limit=limit, findings=findings,
                           notes=notes, origin=url)  # fmt: skip


def preset_table(
    preset: str, url: str, *, env: Mapping[str, str], given: Mapping[str, Any] | None
) -> dict[str, Any]:
    """A preset's ``[source]`` table: its secrets from the environment variables its
    example names (never written), the rest from ``given`` or ``SKUFERRY_SOURCE__<KEY>``."""
    wanted = PRESET_CREDENTIALS.get(preset)
    if wanted is None:
        known = ", ".join(PRESET_CREDENTIALS)
        raise UsageError(f"--preset {preset}: not a system init can read; known: {known}")
    table: dict[str, Any] = {"preset": preset, "url": url}
    for key, variable in wanted.items():
        if variable:
            table[key] = variable
            continue
        value = (given or {}).get(key)
        if value is None:
            value = env.get(f"SKUFERRY_SOURCE__{key.upper()}")
            if key == "headers" and value:
                import json

                value = json.loads(value)
        if value:
            table[key] = value
    return table


def missing_preset_keys(preset: str, table: Mapping[str, Any]) -> list[str]:
    """The keys of ``preset``'s credentials ``table`` still lacks (to ask for)."""
    return [k for k, v in PRESET_CREDENTIALS.get(preset, {}).items() if not v and k not in table]


def _api_preset(
    url: str,
    preset: str,
    *,
    folder: Path,
    env: Mapping[str, str],
    given: Mapping[str, Any] | None,
    limit: int,
) -> Sample:
    table = preset_table(preset, url, env=env, given=given)
    secrets = [v for k, v in PRESET_CREDENTIALS[preset].items() if v]
    unset = [name for name in secrets if not env.get(name)]
    if unset:
        raise UsageError(
            f"--preset {preset} reads its API with the secret in {', '.join(unset)}: set it "
            "(it is read from there, never written into the config)"
        )
    findings = [Finding("format", f"the {preset} preset's API", "sure", "named by --preset")]
    return _through_source(table, folder=folder, env=env, limit=limit, findings=findings,
                           notes=[], origin=url)  # fmt: skip


# --- the first records, through the source ---------------------------------------------


def _through_source(
    table: dict[str, Any],
    *,
    folder: Path,
    env: Mapping[str, str],
    limit: int,
    findings: list[Finding],
    notes: list[str],
    origin: str,
) -> Sample:
    try:
        settings = load(_config(table, folder), folder=folder, env=env, origin="init")
    except ConfigError as exc:
        raise UsageError("the source as found does not load: " + "; ".join(exc.problems)) from exc
    source = open_source(settings.source)
    records: list[dict[str, Any]] = []
    refused: list[str] = []
    complete = True
    with closing(_records(source)) as stream:
        for item in stream:
            if len(records) + len(refused) >= limit:
                complete = False
                break
            if isinstance(item, BadRecord):
                refused.append(item.reason)
            else:
                records.append(item.fields)
    if not records:
        raise UsageError(
            f"{origin}: no record could be read" + (f" ({refused[0]})" if refused else "")
        )
    return Sample(
        source=table,
        records=tuple(records),
        findings=tuple(findings),
        notes=tuple(notes),
        complete=complete,
        unreadable=tuple(refused),
        origin=origin,
        kind=settings.source.type,
    )


def _records(source: Any) -> Iterator[RawRecord | BadRecord]:
    yield from source.records()


@contextlib.contextmanager
def closing(stream: Iterator[Any]) -> Iterator[Iterator[Any]]:
    """``stream``, closed at the end when it is a generator (its files closed at once)."""
    try:
        yield stream
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()


def environment() -> dict[str, str]:
    """The process's environment, for the loader (the edge's one reading of it)."""
    return dict(os.environ)
