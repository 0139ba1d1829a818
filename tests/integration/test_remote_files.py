"""Remote files against real servers on loopback: an HTTP server and an SFTP server (asyncssh).

What is proven: a ``.csv.gz`` at a URL and a CSV in an SFTP drop folder sync end to end
(exit 0, then a second run with zero writes); a download cut halfway fails the pull
(exit 3, nothing written, nothing marked gone); credentials only go to the configured
origin; an SFTP host key is never accepted blindly.
"""

from __future__ import annotations

import asyncio
import csv
import gzip
import io
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from skuferry.config.load import settings_from_dict
from skuferry.errors import ConfigError, SourceError
from skuferry.models import RawRecord
from skuferry.sandbox import Sandbox
from skuferry.sources.base import Source
from skuferry.sources.dispatch import open_source
from tests.integration.conftest import assert_each_once, catalog_keys, catalog_rows
from tests.integration.test_file_formats_e2e import sync_json, write_sync_config, writes

pytestmark = pytest.mark.integration

TOKEN = "dl-token-Xq7pW2mZ9rT4"  # distinctive: a leak into another origin is found


def _csv_bytes(rows: list[dict[str, str]]) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["SKU", "Name", "Price", "Stock"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode()


# -- an HTTP file server on 127.0.0.1 (and a second origin on 127.0.0.2) -------------------------


@dataclass
class FileServer:
    host: str
    files: dict[str, bytes] = field(default_factory=dict)  # path -> body
    cut: set[str] = field(default_factory=set)  # paths whose body stops halfway
    redirects: dict[str, str] = field(default_factory=dict)  # path -> Location
    seen: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Authorization)
    port: int = 0

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"


def _handler(server: FileServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            server.seen.append((self.path, self.headers.get("Authorization")))
            if self.path in server.redirects:
                self.send_response(302)
                self.send_header("Location", server.redirects[self.path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = server.files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.path in server.cut:  # half the body, then the connection drops
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def http_files() -> Iterator[Callable[[str], FileServer]]:
    started: list[ThreadingHTTPServer] = []

    def start(host: str = "127.0.0.1") -> FileServer:
        spec = FileServer(host)
        httpd = ThreadingHTTPServer((host, 0), _handler(spec))
        spec.port = httpd.server_address[1]
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        started.append(httpd)
        return spec

    yield start
    for httpd in started:
        httpd.shutdown()
        httpd.server_close()


def _source(path: str, tmp_path: Path, **extra: Any) -> Source:
    settings = settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k" * 12},
            "source": {"type": "csv", "path": path, **extra},
            "state": {"path": str(tmp_path / "s.db")},
        },
        base_dir=tmp_path,
    )
    return open_source(settings.source)


def _skus(source: Source) -> list[str]:
    return [str(r.fields["SKU"]) for r in source.records() if isinstance(r, RawRecord)]


def test_a_csv_gz_at_a_url_is_downloaded_with_its_headers_and_read(
    http_files: Callable[[str], FileServer], tmp_path: Path
) -> None:
    server = http_files("127.0.0.1")
    server.files["/export/products.csv.gz"] = gzip.compress(_csv_bytes(catalog_rows(5)))
    url = f"{server.origin}/export/products.csv.gz"
    source = _source(url, tmp_path, headers={"Authorization": f"Bearer {TOKEN}"})

    assert _skus(source) == catalog_keys(5)
    assert server.seen == [("/export/products.csv.gz", f"Bearer {TOKEN}")]
    assert source.describe() == url


def test_a_download_cut_halfway_fails_before_any_record(
    http_files: Callable[[str], FileServer], tmp_path: Path
) -> None:
    server = http_files("127.0.0.1")
    server.files["/products.csv.gz"] = gzip.compress(_csv_bytes(catalog_rows(2000)))
    server.cut.add("/products.csv.gz")
    records = _source(f"{server.origin}/products.csv.gz", tmp_path).records()

    with pytest.raises(SourceError) as info:
        next(records)  # not one record: the pull fails as a whole
    assert f"{server.origin}/products.csv.gz" in str(info.value)


def test_a_missing_file_names_the_status(
    http_files: Callable[[str], FileServer], tmp_path: Path
) -> None:
    server = http_files("127.0.0.1")
    with pytest.raises(SourceError, match="HTTP 404"):
        _skus(_source(f"{server.origin}/gone.csv", tmp_path))


def test_a_redirect_to_another_origin_is_refused_and_gets_no_credentials(
    http_files: Callable[[str], FileServer], tmp_path: Path
) -> None:
    home, other = http_files("127.0.0.1"), http_files("127.0.0.2")
    other.files["/products.csv"] = _csv_bytes(catalog_rows(3))
    home.redirects["/products.csv"] = f"{other.origin}/products.csv"
    url = f"{home.origin}/products.csv"
    headers = {"Authorization": f"Bearer {TOKEN}"}

    with pytest.raises(SourceError) as info:
        _skus(_source(url, tmp_path, headers=headers))
    assert f"127.0.0.2:{other.port}" in str(info.value)
    assert f"127.0.0.1:{home.port}" in str(info.value)
    assert other.seen == [], "the other origin was contacted"

    allowed = _source(url, tmp_path, headers=headers, allowed_origins=[other.origin])
    assert _skus(allowed) == catalog_keys(3)
    assert other.seen == [("/products.csv", f"Bearer {TOKEN}")]


def test_a_redirect_within_the_origin_is_followed(
    http_files: Callable[[str], FileServer], tmp_path: Path
) -> None:
    server = http_files("127.0.0.1")
    server.files["/v2/products.csv.gz"] = gzip.compress(_csv_bytes(catalog_rows(2)))
    server.redirects["/latest"] = "/v2/products.csv.gz"
    assert _skus(_source(f"{server.origin}/latest", tmp_path)) == catalog_keys(2)


# -- an SFTP server on 127.0.0.1 (asyncssh, in-process) ----------------------------------------


@dataclass
class SftpServer:
    root: Path
    port: int
    known_hosts: Path
    key_file: Path
    password_file: Path
    cut_after: list[int]  # [n]: reads past byte n drop the connection (empty: never)

    def url(self, name: str) -> str:
        return f"sftp://erp@127.0.0.1:{self.port}/{name}"


PASSWORD = "sftp-pass-Hn4vB8cQ"


class _Server(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return True

    def validate_password(self, username: str, password: str) -> bool:
        return username == "erp" and password == PASSWORD


def _sftp_factory(root: Path, cut_after: list[int]) -> Callable[[Any], asyncssh.SFTPServer]:
    class Files(asyncssh.SFTPServer):
        def __init__(self, chan: Any) -> None:
            super().__init__(chan, chroot=str(root).encode())

        def read(self, file_obj: Any, offset: int, size: int) -> Any:
            if cut_after and offset >= cut_after[0]:
                self.channel.get_connection().abort()  # the connection drops mid-file
            return super().read(file_obj, offset, size)

    return Files


@pytest.fixture
def sftp(tmp_path: Path) -> Iterator[SftpServer]:
    root = tmp_path / "drop"
    root.mkdir()
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    key_file = tmp_path / "id_ed25519"
    client_key.write_private_key(str(key_file))
    key_file.chmod(0o600)
    password_file = tmp_path / "sftp_password"
    password_file.write_text(PASSWORD + "\n", encoding="utf-8")
    password_file.chmod(0o600)
    cut_after: list[int] = []

    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, Any] = {}

    async def serve() -> None:
        holder["server"] = await asyncssh.listen(
            "127.0.0.1",
            0,
            server_factory=_Server,
            server_host_keys=[host_key],
            authorized_client_keys=asyncssh.import_authorized_keys(
                client_key.export_public_key().decode()
            ),
            sftp_factory=_sftp_factory(root, cut_after),
        )
        ready.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(serve(), loop).result(timeout=30)
    ready.wait(30)
    server = holder["server"]
    port = server.sockets[0].getsockname()[1]
    known_hosts = tmp_path / "known_hosts"
    line = host_key.export_public_key().decode().strip()
    known_hosts.write_text(f"[127.0.0.1]:{port} {line}\n", encoding="utf-8")
    yield SftpServer(root, port, known_hosts, key_file, password_file, cut_after)

    async def stop() -> None:
        server.close()
        await server.wait_closed()

    asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=30)
    loop.close()


def _sftp_source(sftp: SftpServer, tmp_path: Path, name: str, **auth: Any) -> Source:
    auth = auth or {"sftp_key_file": str(sftp.key_file)}
    return _source(sftp.url(name), tmp_path, sftp_known_hosts=str(sftp.known_hosts), **auth)


def test_sftp_with_a_key_downloads_the_drop_folder_file(sftp: SftpServer, tmp_path: Path) -> None:
    (sftp.root / "products.csv").write_bytes(_csv_bytes(catalog_rows(4)))
    assert _skus(_sftp_source(sftp, tmp_path, "products.csv")) == catalog_keys(4)


def test_sftp_with_a_password_file_and_a_gzipped_file(sftp: SftpServer, tmp_path: Path) -> None:
    (sftp.root / "products.csv.gz").write_bytes(gzip.compress(_csv_bytes(catalog_rows(3))))
    source = _sftp_source(
        sftp, tmp_path, "products.csv.gz", sftp_password_file=str(sftp.password_file)
    )
    assert _skus(source) == catalog_keys(3)


def test_sftp_refuses_an_unknown_host_key(sftp: SftpServer, tmp_path: Path) -> None:
    (sftp.root / "products.csv").write_bytes(_csv_bytes(catalog_rows(1)))
    stranger = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    sftp.known_hosts.write_text(f"[127.0.0.1]:{sftp.port} {stranger}\n", encoding="utf-8")
    with pytest.raises(SourceError, match="host key"):
        _skus(_sftp_source(sftp, tmp_path, "products.csv"))


def test_sftp_refuses_a_wrong_password_and_names_no_secret(
    sftp: SftpServer, tmp_path: Path
) -> None:
    (sftp.root / "products.csv").write_bytes(_csv_bytes(catalog_rows(1)))
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password", encoding="utf-8")
    wrong.chmod(0o600)
    with pytest.raises(SourceError, match="refused the login") as info:
        _skus(_sftp_source(sftp, tmp_path, "products.csv", sftp_password_file=str(wrong)))
    assert "not-the-password" not in str(info.value)


def test_sftp_a_missing_file_and_a_cut_connection_fail_the_pull(
    sftp: SftpServer, tmp_path: Path
) -> None:
    with pytest.raises(SourceError, match="no such file"):
        _skus(_sftp_source(sftp, tmp_path, "missing.csv"))
    (sftp.root / "big.csv").write_bytes(_csv_bytes(catalog_rows(5000)))
    sftp.cut_after.append(100_000)
    with pytest.raises(SourceError, match=r"sftp://erp@127\.0\.0\.1.*download failed"):
        next(_sftp_source(sftp, tmp_path, "big.csv").records())


def test_sftp_config_requires_known_hosts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="sftp_known_hosts"):
        _source("sftp://erp@127.0.0.1:2222/products.csv", tmp_path, sftp_key_file="k")


# -- end to end: skuferry sync as a user runs it ------------------------------------------------


CSV_FIELDS = """\
sku = "SKU"
name = "Name"
price = { column = "Price", type = "decimal" }
stock = { column = "Stock", type = "integer" }"""


def _gone(tmp_path: Path) -> int:
    with sqlite3.connect(tmp_path / "state" / "skuferry.db") as db:
        (count,) = db.execute("SELECT count(*) FROM products WHERE state = 'gone'").fetchone()
    return int(count)


def test_sync_a_csv_gz_at_a_url_then_a_cut_download_changes_nothing(
    sandbox: Sandbox,
    http_files: Callable[[str], FileServer],
    tmp_path: Path,
    run_cli: Callable[..., Any],
) -> None:
    server = http_files("127.0.0.1")
    server.files["/products.csv.gz"] = gzip.compress(_csv_bytes(catalog_rows(30)))
    source = f'type = "csv"\npath = "{server.origin}/products.csv.gz"'
    config = write_sync_config(sandbox, tmp_path, source, CSV_FIELDS)

    assert sync_json(run_cli, config)["created"] == 30
    assert_each_once(sandbox, catalog_keys(30))
    assert sync_json(run_cli, config)["unchanged"] == 30
    assert writes(sandbox) == 30, "a second run made writes"

    server.cut.add("/products.csv.gz")
    result = run_cli("sync", "--config", str(config))
    assert result.returncode == 3, result.stderr
    assert "/products.csv.gz" in result.stderr
    assert writes(sandbox) == 30 and _gone(tmp_path) == 0, "a cut download changed something"


def test_sync_a_csv_from_an_sftp_drop_folder(
    sandbox: Sandbox, sftp: SftpServer, tmp_path: Path, run_cli: Callable[..., Any]
) -> None:
    (sftp.root / "products.csv").write_bytes(_csv_bytes(catalog_rows(12)))
    source = (
        f'type = "csv"\npath = "{sftp.url("products.csv")}"\n'
        f'sftp_known_hosts = "{sftp.known_hosts}"\nsftp_key_file = "{sftp.key_file}"'
    )
    config = write_sync_config(sandbox, tmp_path, source, CSV_FIELDS)
    assert sync_json(run_cli, config)["created"] == 12
    assert_each_once(sandbox, catalog_keys(12))
    assert sync_json(run_cli, config)["unchanged"] == 12
    assert writes(sandbox) == 12, "a second run made writes"
