"""``skuferry init --from URL`` on an export served at a URL, as a new user runs it: a
gzipped German ERP CSV and an XLSX over HTTP, a CSV in an SFTP drop folder; then
``check`` and a first ``sync`` against the sandbox put every valid row on the CMS.

A big file is sampled, never read whole: the server counts the bytes it sent, with and
without Range requests. A download that needs a credential reads it from the
environment, and the config never holds it. A page in place of a file is refused.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import stat
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from skuferry.discover import read, remote
from skuferry.sandbox import Sandbox
from skuferry.sandbox.catalog_files import bmecat, bmecat_article
from tests.init_exports import (
    german_gz,
    gtin,
    write_german,
    write_german_gz,
    write_xlsx_export,
    xlsx,
)
from tests.integration.conftest import KEY
from tests.integration.test_init_exports import Run, assert_landed, init_check_sync
from tests.integration.test_remote_files import SftpServer, sftp  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration

XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
TOKEN = "erp-dl-token-Wm3Kp9Qx"  # distinctive: a leak into a file or an output is found


@dataclass
class Served:
    """A file server on 127.0.0.1: what it serves, what it was asked, what it sent."""

    ranges: bool = True  # honours Range requests (206)
    token: str | None = None  # asks for "Authorization: Bearer <token>"
    files: dict[str, tuple[bytes, str]] = field(default_factory=dict)  # path -> body, type
    sent: dict[str, int] = field(default_factory=dict)  # path -> bytes written to the socket
    asked: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Range)
    origin: str = ""

    def url(self, path: str) -> str:
        return self.origin + path


_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


def _handler(served: Served) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            served.asked.append((self.path, self.headers.get("Range")))
            if served.token and self.headers.get("Authorization") != f"Bearer {served.token}":
                self._answer(401, b"sign in first", "text/plain")
                return
            if self.path not in served.files:
                self._answer(404, b"no such file", "text/plain")
                return
            body, kind = served.files[self.path]
            asked = _RANGE.fullmatch(self.headers.get("Range", ""))
            if served.ranges and asked:
                first = int(asked.group(1))
                last = min(int(asked.group(2) or len(body) - 1), len(body) - 1)
                extra = {"Content-Range": f"bytes {first}-{last}/{len(body)}"}
                self._answer(206, body[first : last + 1], kind, extra)
            else:
                self._answer(200, body, kind)

        def _answer(
            self, status: int, body: bytes, kind: str, extra: dict[str, str] | None = None
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            if served.ranges:
                self.send_header("Accept-Ranges", "bytes")
            for name, value in (extra or {}).items():
                self.send_header(name, value)
            self.end_headers()
            try:
                for at in range(0, len(body), 1 << 16):
                    self.wfile.write(body[at : at + (1 << 16)])
                    served.sent[self.path] = served.sent.get(self.path, 0) + len(
                        body[at : at + (1 << 16)]
                    )
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client had enough

        def log_message(self, *_args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def serve() -> Iterator[Callable[..., Served]]:
    started: list[ThreadingHTTPServer] = []

    def start(**options: Any) -> Served:
        served = Served(**options)
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(served))
        served.origin = f"http://127.0.0.1:{httpd.server_address[1]}"
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        started.append(httpd)
        return served

    yield start
    for httpd in started:
        httpd.shutdown()
        httpd.server_close()


def _config(tmp_path: Path) -> str:
    config = tmp_path / "skuferry.toml"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    return config.read_text(encoding="utf-8")


def test_a_gzipped_german_csv_at_a_url(
    serve: Callable[..., Served], run_cli: Run, sandbox: Sandbox, tmp_path: Path
) -> None:
    server = serve()
    files = tmp_path / "files"
    files.mkdir()
    body = write_german_gz(files).read_bytes()
    server.files["/export/Artikel.csv.gz"] = (body, "application/gzip")
    url = server.url("/export/Artikel.csv.gz")

    summary, made = init_check_sync(run_cli, sandbox, url)
    assert_landed(sandbox, german_gz(), summary)
    config = _config(tmp_path)
    assert f'path = "{url}"' in config
    assert 'delimiter = ";"' in config and 'decimal = ","' in config
    assert "served as: an export file (sure" in made.stdout
    assert "compression: gzip (sure" in made.stdout


def test_an_xlsx_at_a_url(
    serve: Callable[..., Served], run_cli: Run, sandbox: Sandbox, tmp_path: Path
) -> None:
    server = serve(ranges=False)
    files = tmp_path / "files"
    files.mkdir()
    server.files["/Sortiment.xlsx"] = (write_xlsx_export(files).read_bytes(), XLSX)
    summary, made = init_check_sync(run_cli, sandbox, server.url("/Sortiment.xlsx"))
    assert_landed(sandbox, xlsx(), summary)
    config = _config(tmp_path)
    assert 'type = "xlsx"' in config and 'sheet = "Artikel"' in config
    assert "header_row = 3" in config
    assert "fetched: the whole file" in made.stdout


def _big_csv(rows: int) -> bytes:
    """An ERP export of ``rows`` rows; its GUIDs and image links (hashes) keep it from
    compressing to almost nothing, as real ones do (~10 MB gzipped)."""
    lines = ["Artikelnummer;GUID;Bezeichnung;Langtext;VK-Preis;Bestand;Bild"]
    for i in range(rows):
        guid = uuid.UUID(bytes=hashlib.md5(b"%d" % i).digest())  # noqa: S324 - not security
        image = hashlib.sha1(b"%d" % i).hexdigest()  # noqa: S324 - not security
        lines.append(
            f"{i:07d};{guid};Schraube M{i % 12 + 3} x {i % 90 + 10} verzinkt;"
            f"Kreuzschlitz, DIN {7985 + i % 7}, Packung zu {i % 9 + 1}00 Stück;"
            f"{i % 900 + 1},{i % 100:02d};{i % 5000};https://cdn.example.com/{image}.jpg"
        )
    return ("\r\n".join(lines) + "\r\n").encode("utf-8")


@pytest.mark.parametrize("ranges", [True, False], ids=["range-honoured", "range-ignored"])
@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_a_big_export_at_a_url_is_sampled_never_read_whole(
    serve: Callable[..., Served], run_cli: Run, tmp_path: Path, ranges: bool, packed: bool
) -> None:
    body = _big_csv(200_000)
    path = "/export/Artikel.csv"
    if packed:
        body, path = gzip.compress(body, compresslevel=1), path + ".gz"
    server = serve(ranges=ranges)
    server.files[path] = (body, "application/octet-stream")

    made = run_cli("init", "--yes", "--from", server.url(path))
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    assert server.sent[path] < len(body), (server.sent[path], len(body))
    if ranges:  # only the windows asked left the server
        assert all(asked for _, asked in server.asked), server.asked
        assert server.sent[path] <= 5 << 20
    else:  # one answer, closed early; the preview read init's copy, not the URL again
        assert len(server.asked) == 1, server.asked
    config = _config(tmp_path)
    assert f'path = "{server.url(path)}"' in config
    assert "It read the first 500 records" in config
    assert "init read only the start of" in config
    assert "A dry run of the first 500 records" in made.stdout


def test_wide_records_at_a_url_are_cut_after_the_last_whole_one(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    """Records so wide that the sample's 4 MiB hold fewer than 500: the sample ends where
    the download stopped, and must end on a whole record (XML, JSON Lines and CSV)."""
    server = serve()
    long = "Hochwertiger Stahl, geschliffen; " * 300  # ~10 KB, like Magento's descriptions
    articles = [
        bmecat_article(f"{i:06d}", f"Spiralbohrer HSS {i} mm", ean=gtin(f"400638{i:06d}"),
                       price=f"{i % 90 + 1}.50", long=f"{long}Ende {i}")
        for i in range(1000)
    ]  # fmt: skip
    server.files["/katalog.xml"] = (bmecat(articles).encode(), "application/xml")
    lines = [
        json.dumps({"offerId": f"o-{i}", "description": f"{long}Ende {i}"}) for i in range(1000)
    ]
    server.files["/feed"] = (("\n".join(lines) + "\n").encode(), "application/x-ndjson")
    lined = long.replace("; ", ";\r\n")  # a quoted cell of many lines: a cut lands inside one
    rows = [f'{i};Bohrer {i};"{lined}Ende {i}";{i},50' for i in range(1000)]
    table = "\r\n".join(["Artikelnummer;Bezeichnung;Langtext;Preis", *rows]) + "\r\n"
    server.files["/Artikel.csv"] = (table.encode(), "text/csv")
    # where each record's long text is (the XML record nests it)
    text_at: dict[str, tuple[str, ...]] = {
        "/katalog.xml": ("ARTICLE_DETAILS", "DESCRIPTION_LONG"),
        "/feed": ("description",),
        "/Artikel.csv": ("Langtext",),
    }
    for path, kind in (("/katalog.xml", "xml"), ("/feed", "jsonl"), ("/Artikel.csv", "csv")):
        body = server.files[path][0]
        scratch = tmp_path / path.strip("/")
        scratch.mkdir()
        found = read.sample(server.url(path), folder=tmp_path, env={}, scratch=scratch)
        assert found.source["type"] == kind and found.source["path"] == server.url(path)
        assert 300 < len(found.records) < read.SAMPLE_RECORDS and not found.complete
        assert not found.unreadable  # no half record refused
        text: Any = found.records[-1]
        for name in text_at[path]:
            text = text[name]
        assert str(text).endswith(f"Ende {len(found.records) - 1}"), path  # whole
        assert server.sent[path] <= remote.CONTENT_BYTES < len(body)


def test_a_credential_for_the_download_comes_from_the_environment_never_the_file(
    serve: Callable[..., Served], run_cli: Run, sandbox: Sandbox, tmp_path: Path
) -> None:
    server = serve(token=TOKEN)
    files = tmp_path / "files"
    files.mkdir()
    server.files["/Artikel.csv.gz"] = (write_german_gz(files).read_bytes(), "application/gzip")
    url = server.url("/Artikel.csv.gz")

    refused = run_cli("init", "--yes", "--from", url)
    assert refused.returncode == 2
    assert "HTTP 401" in refused.stderr and "SKUFERRY_SOURCE__HEADERS" in refused.stderr
    assert not (tmp_path / "skuferry.toml").exists()

    headers = {"SKUFERRY_SOURCE__HEADERS": f'{{"Authorization": "Bearer {TOKEN}"}}'}
    summary, made = init_check_sync(run_cli, sandbox, url, env=headers)
    assert_landed(sandbox, german_gz(), summary)
    config = _config(tmp_path)
    assert TOKEN not in config and "headers =" not in config
    assert "SKUFERRY_SOURCE__HEADERS" in config  # said where it comes from
    assert TOKEN not in made.stdout + made.stderr


def test_a_page_in_place_of_the_file_is_refused(
    serve: Callable[..., Served], run_cli: Run, tmp_path: Path
) -> None:
    server = serve()
    page = b"<!DOCTYPE html><html><body><form>Sign in</form></body></html>"
    server.files["/export/Artikel.csv"] = (page, "text/html; charset=utf-8")
    made = run_cli("init", "--yes", "--from", server.url("/export/Artikel.csv"))
    assert made.returncode == 2
    assert "answers an HTML page" in made.stderr
    assert not (tmp_path / "skuferry.toml").exists()


def test_a_csv_in_an_sftp_drop_folder(
    sftp: SftpServer,  # noqa: F811 - the fixture imported above
    run_cli: Run,
    sandbox: Sandbox,
    tmp_path: Path,
) -> None:
    write_german(sftp.root)
    summary, made = init_check_sync(
        run_cli,
        sandbox,
        sftp.url("Artikel.csv"),
        "--source",
        f"sftp_known_hosts={sftp.known_hosts}",
        "--source",
        f"sftp_key_file={sftp.key_file.name}",
    )
    export = german_gz()
    assert_landed(sandbox, export, summary)
    config = _config(tmp_path)
    assert f'path = "{sftp.url("Artikel.csv")}"' in config
    assert 'sftp_known_hosts = "known_hosts"' in config  # relative to the config's folder
    assert 'sftp_key_file = "id_ed25519"' in config
    assert "read by offset over SFTP" in made.stdout or "the whole file" in made.stdout
    assert KEY not in config
