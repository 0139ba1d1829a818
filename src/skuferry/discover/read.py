"""The edge ``init`` reads through: a sample of the file or API, never all of a big one.

First the framing, from the start of the file (its first MiB, decompressed), the first
rows of each sheet, the start of an XML file, or the first page of an API. Then the
first records through the very source a sync uses (``open_source``, configured as
found), so that what is proposed is read exactly as the sync will read it.

A URL (``https://``, ``http://``, ``sftp://``) is read by ``remote``: only the start of
the file, and what answered (an export file or a JSON API) is decided from it. A file's
start is cut at its last whole record and read here as a local file, its ``[source]``
table then written with the URL and the keys the file sources read it with.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skuferry import files
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import FileSourceSettings, Settings
from skuferry.discover import cut, framing, remote
from skuferry.discover.known import PRESET_CREDENTIALS
from skuferry.discover.model import Finding, Sample
from skuferry.discover.render import SANDBOX_URL
from skuferry.errors import ConfigError, SourceError, UsageError
from skuferry.models import BadRecord, RawRecord
from skuferry.net.paths import REMOTE_SCHEMES, url_scheme
from skuferry.redact import is_secret_header
from skuferry.sources import compression
from skuferry.sources.dispatch import open_source
from skuferry.sources.http import safe_url
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
    scratch: Path | None = None,
) -> Sample:
    """A sample of the export or API ``origin`` (a path, or an http(s) or sftp URL).

    ``folder`` is where the config goes (paths are written relative to it); ``given``
    holds keys of the ``[source]`` table the user gave (a preset's client id).
    ``scratch``: a private folder that outlives the sample, for a remote file's start
    (the sample's ``stand_in``); needed for a URL that is not a preset's API.
    """
    scheme = url_scheme(origin)
    if scheme in ("http", "https") and preset is not None:
        return _api_preset(origin, preset, folder=folder, env=env, given=given, limit=limit)
    if scheme in REMOTE_SCHEMES:
        if scratch is None:
            raise ValueError("a URL's sample needs a scratch folder")
        return _remote(origin, folder=folder, env=env, limit=limit, scratch=scratch)
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


@dataclass(frozen=True)
class _AtUrl:
    """What a local copy of a remote file's start stands for: the URL and how it was read."""

    url: str
    shown: str
    whole: bool  # the copy is the whole file
    keys: dict[str, Any]  # the [source] keys the file sources read it with (as written)
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def stands_for(self, sample: Sample, copy: Path) -> Sample:
        """``sample`` of the copy as the sample of the URL."""
        source = {**sample.source, "path": self.url, **self.keys}
        return dataclasses.replace(
            sample,
            source=source,
            findings=(*self.findings, *sample.findings),
            notes=(*self.notes, *sample.notes),
            complete=sample.complete and self.whole,
            origin=self.shown,
            stand_in=str(copy),
        )


def _file(
    path: Path,
    *,
    folder: Path,
    env: Mapping[str, str],
    limit: int,
    at: _AtUrl | None = None,
) -> Sample:
    """A local file's sample; ``at``: the file is a remote file's start (or all of it)."""
    written = relative(path, folder)
    named = at.shown if at else str(path)
    findings: list[Finding] = []
    notes: list[str] = []
    if compression.sniff(path) == "zip" and compression.is_xlsx(path):
        fmt = "xlsx"
        findings.append(Finding("format", "xlsx", "sure", "an Excel workbook"))
    else:
        name = _inner_name(path)
        head, complete = _head(path, HEAD_BYTES)
        complete = complete and (at is None or at.whole)
        fmt, found = framing.format_of(name, head)
        findings.append(found)
        if compression.sniff(path) != "plain" and at is None:  # at a URL: said by remote
            findings.append(
                Finding("compression", compression.sniff(path), "sure", "read as it streams")
            )
    table: dict[str, Any] = {"type": fmt, "path": written}
    if fmt == "json":
        stem = Path(name).stem
        raise UsageError(
            f"{named} is one JSON document, not JSON Lines (one object per line): skuferry "
            "reads JSON Lines, or the document from an API URL; convert it with "
            f"`jq -c '.[]' {name} > {stem}.jsonl` and run init on that"
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
    sample = _through_source(table, folder=folder, env=env, limit=limit, findings=findings,
                             notes=notes, origin=named)  # fmt: skip
    return sample if at is None else at.stands_for(sample, path)


# --- an export at a URL -------------------------------------------------------------------

# The [source] keys a remote file is read with (the file sources' own): given to init in
# SKUFERRY_SOURCE__<KEY> (or --source KEY=VALUE) and written into the config, except a
# header that holds a credential.
CONNECTION_KEYS = (
    "headers", "allowed_origins", "allow_insecure_http", "ca_bundle", "timeout_s",
    "sftp_known_hosts", "sftp_key_file", "sftp_password_file", "sftp_password_env",
)  # fmt: skip
PATH_KEYS = frozenset({"ca_bundle", "sftp_known_hosts", "sftp_key_file", "sftp_password_file"})


def _remote(url: str, *, folder: Path, env: Mapping[str, str], limit: int, scratch: Path) -> Sample:
    """The start of the file at ``url``: sampled as a file, or handed on as a JSON API."""
    try:
        settings = load(_config({"type": "csv", "path": url}, folder), folder=folder, env=env,
                        origin="init")  # fmt: skip
    except ConfigError as exc:
        raise UsageError(f"--from {url}: " + "; ".join(exc.problems)) from exc
    if not isinstance(settings.source, FileSourceSettings):  # a csv table, as built
        raise TypeError(settings.source)
    shown = safe_url(url)
    try:
        fetched = remote.fetch(settings.source, spill=scratch / "spill", env=dict(env))
    except SourceError as exc:
        raise UsageError(f"--from {shown}: {exc}{_credentials_hint(str(exc))}") from exc
    if fetched.served == "page":
        raise UsageError(
            f"{shown} answers an HTML page, not an export file or a JSON API (a sign-in or "
            f"a download page?): {fetched.findings[0].why}; give the file's own URL"
        )
    if fetched.served == "api" and not url.lower().startswith("sftp:"):
        return _api(url, folder=folder, env=env, limit=limit, served=fetched.findings[0])
    copy = scratch / fetched.name
    if fetched.zipped is not None:
        fetched.zipped.rename(copy)
    else:
        _write_whole_records(copy, fetched)
    keys, notes = connection(settings.source, folder=folder)
    if not fetched.whole:
        notes.append(
            f"init read only the start of {shown}; check and sync download it whole at "
            "each run, and read every record"
        )
    at = _AtUrl(url, shown, fetched.whole, keys, fetched.findings, notes)
    return _file(copy, folder=folder, env=_local(env), limit=limit, at=at)


def _local(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the remote keys it gives [source]: the local copy is read without."""
    remote_keys = {f"SKUFERRY_SOURCE__{key.upper()}" for key in CONNECTION_KEYS}
    return {name: value for name, value in env.items() if name.upper() not in remote_keys}


def _credentials_hint(said: str) -> str:
    if "HTTP 401" not in said and "HTTP 403" not in said:
        return ""
    return (
        "; the server asks for credentials: give a header in SKUFERRY_SOURCE__HEADERS "
        """(JSON, e.g. '{"Authorization": "Bearer ..."}'), or --preset NAME for a known """
        "system's API; init never writes a credential into the config"
    )


def _write_whole_records(copy: Path, fetched: remote.Fetched) -> None:
    """The content's start, cut after its last whole record, to the private file ``copy``."""
    content = fetched.content
    files.create_private(copy)
    with copy.open("wb") as out:
        out.write(content)
    if fetched.whole:
        return
    fmt, _found = framing.format_of(fetched.name, content[:HEAD_BYTES])
    if fmt == "csv":
        content = cut.csv_records(content)
    elif fmt == "jsonl":
        content = cut.lines(content)
    elif fmt == "xml":
        element = _record_element(copy)
        content = content if element is None else cut.xml_records(content, element[0])
    with copy.open("wb") as out:
        out.write(content)


def connection(settings: FileSourceSettings, *, folder: Path) -> tuple[dict[str, Any], list[str]]:
    """The keys a remote file was read with, as the config writes them, and notes.

    Headers that hold a credential (``Authorization``, an API-key header) are never
    written: the config says where they come from instead (``SKUFERRY_SOURCE__HEADERS``).
    """
    given = settings.model_fields_set
    table: dict[str, Any] = {}
    notes: list[str] = []
    for key in CONNECTION_KEYS:
        if key not in given:
            continue
        value = getattr(settings, key)
        if key == "headers":
            secret = sorted(name for name in value if is_secret_header(name))
            if secret:
                notes.append(
                    f"the download's headers ({', '.join(secret)} holds a credential) are not "
                    "written here: set SKUFERRY_SOURCE__HEADERS (JSON, as for init) where "
                    "check and sync run; the environment lays it over [source]"
                )
                continue
        if key in PATH_KEYS and value is not None:
            value = relative(Path(value), folder)
        table[key] = value
    return table, notes


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


def _api(
    url: str,
    *,
    folder: Path,
    env: Mapping[str, str],
    limit: int,
    served: Finding | None = None,
) -> Sample:
    """A JSON API: its first answer tells where the records are and how the pages link.

    ``served``: how sure it is that a JSON API answered (``framing.served_as``)."""
    probe = {"type": "http", "url": url, "items_path": "[@]", "pagination": "none"}
    settings = load(_config(probe, folder), folder=folder, env=env, origin="init")
    source = open_source(settings.source)
    try:
        with closing(source.records()) as records:
            first = next(records, None)
    except SourceError as exc:
        raise UsageError(
            f"{safe_url(url)} did not answer as a JSON API ({exc}); an API that asks for "
            "credentials: --preset NAME for a known system, or write [source] auth by hand "
            "(docs/sources/http.md)"
        ) from exc
    body = first.fields if isinstance(first, RawRecord) else None
    found = framing.records_path(body)
    if found is None:
        raise UsageError(f"{url}: its answer holds no list of records (objects)")
    items_path, finding = found
    said = served or Finding("format", "a JSON API", "sure", "the URL answers JSON")
    findings = [said, finding]
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
