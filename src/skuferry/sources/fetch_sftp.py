"""Download an ``sftp://user@host:port/path`` remote file (an ERP's drop folder), with asyncssh.

The server's host key must be in ``sftp_known_hosts`` (OpenSSH format): an
unknown or changed key is refused, never accepted on first use. Authentication
uses ``sftp_key_file`` and/or a password from ``sftp_password_file`` /
``sftp_password_env``; no ssh-agent, no ``~/.ssh`` keys or config are consulted,
so what the config says is all that is tried.

ERPs often rewrite the file in place: the size and modification time are read
before and after the download, and a file that changed meanwhile (or arrived
shorter than its size) fails the pull, to be read whole on the next run.

``read_start_sftp`` reads only the start of the file (``skuferry init``'s sample), with
the same login.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Coroutine, Iterator, Mapping
from typing import Any, BinaryIO, TypeVar
from urllib.parse import unquote, urlsplit

import asyncssh

from skuferry import logs
from skuferry.config.schema import FileSourceSettings
from skuferry.config.secrets import read_secret
from skuferry.errors import ConfigError, SourceError
from skuferry.sources.file_start import Start, Take

log = logs.get(__name__)

_CHUNK = 1 << 16
T = TypeVar("T")


def download_sftp(
    settings: FileSourceSettings, dest: BinaryIO, *, env: Mapping[str, str] | None = None
) -> int:
    """Write the file at ``settings.path`` to ``dest``; the number of bytes written."""
    host, path, options, where = _login(settings, env)
    with _failures(where, settings):
        return _run(_download(host, path, options, dest, settings.timeout_s))


def read_start_sftp(
    settings: FileSourceSettings, take: Take, *, env: Mapping[str, str] | None = None
) -> Start:
    """Hand the file at ``settings.path`` to ``take`` from its first byte until ``take``
    returns False or the file ends (``RemoteFileSource.read_start``): SFTP reads a file
    by offset, so nothing past what ``take`` wanted is asked of the server."""
    host, path, options, where = _login(settings, env)
    with _failures(where, settings):
        return _run(_read_start(host, path, options, take, settings.timeout_s))


def _login(
    settings: FileSourceSettings, env: Mapping[str, str] | None
) -> tuple[str, str, dict[str, Any], str]:
    """The host, the file's path, asyncssh's options (only what the config names), and
    the URL as messages name it (no secret)."""
    parts = urlsplit(str(settings.path))
    where = f"sftp://{parts.username}@{parts.hostname}:{parts.port or 22}{parts.path}"
    known_hosts = settings.sftp_known_hosts
    if known_hosts is None or not known_hosts.is_file():  # the model requires it; it may be gone
        raise ConfigError([f"at 'source.sftp_known_hosts': {known_hosts} is not a readable file"])
    password = read_secret(
        inline=None,
        file=settings.sftp_password_file,
        env_name=settings.sftp_password_env,
        key="sftp_password",
        env=env,
    )
    options: dict[str, Any] = {
        "port": parts.port or 22,
        "username": unquote(parts.username or ""),
        "known_hosts": str(known_hosts),
        "client_keys": [str(settings.sftp_key_file)] if settings.sftp_key_file else None,
        "password": password.get_secret_value() if password else None,
        "agent_path": None,  # only what the config names
        "config": [],  # no ~/.ssh/config
        "gss_host": None,  # no Kerberos attempts
        "connect_timeout": settings.timeout_s,
        "login_timeout": settings.timeout_s,
    }
    return parts.hostname or "", unquote(parts.path), options, where


@contextlib.contextmanager
def _failures(where: str, settings: FileSourceSettings) -> Iterator[None]:
    """asyncssh's errors as skuferry's, naming the URL and never a secret."""
    known_hosts = settings.sftp_known_hosts
    try:
        yield
    except asyncssh.HostKeyNotVerifiable as exc:
        raise SourceError(
            f"{where}: the server's host key is not the one in sftp_known_hosts "
            f"({known_hosts}), or is not listed there; refused ({exc.reason})"
        ) from None
    except asyncssh.PermissionDenied:
        raise SourceError(f"{where}: the server refused the login (key or password)") from None
    except asyncssh.SFTPNoSuchFile:
        raise SourceError(f"{where}: no such file on the server") from None
    except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as exc:
        raise ConfigError(
            [f"at 'source.sftp_key_file': cannot load {settings.sftp_key_file}: {exc}"]
        ) from None
    except (asyncssh.Error, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
        raise SourceError(f"{where}: download failed: {reason}") from None


async def _read_start(
    host: str, path: str, options: dict[str, Any], take: Take, timeout_s: float
) -> Start:
    async with asyncssh.connect(host, **options) as conn, conn.start_sftp_client() as sftp:
        size = (await sftp.stat(path)).size
        received = 0
        async with sftp.open(path, "rb") as remote:
            while True:
                chunk: bytes = await asyncio.wait_for(remote.read(_CHUNK), timeout_s)
                if not chunk:
                    return Start(received, size, ended=True, ranged=True)
                received += len(chunk)
                if not take(chunk):
                    ended = size is not None and received >= size
                    return Start(received, size, ended=ended, ranged=True)


async def _download(
    host: str, path: str, options: dict[str, Any], dest: BinaryIO, timeout_s: float
) -> int:
    async with asyncssh.connect(host, **options) as conn, conn.start_sftp_client() as sftp:
        before = await sftp.stat(path)
        written = 0
        async with sftp.open(path, "rb") as remote:
            while True:
                chunk: bytes = await asyncio.wait_for(remote.read(_CHUNK), timeout_s)
                if not chunk:
                    break
                dest.write(chunk)
                written += len(chunk)
        after = await sftp.stat(path)
    if (before.size, before.mtime) != (after.size, after.mtime) or written != after.size:
        raise SourceError(
            f"sftp://{host}{path} changed while it was downloaded ({written} bytes read, "
            f"{after.size} now); it is read again on the next run"
        )
    return written


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end from synchronous code, even under a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a loop of its own, in a thread
        return pool.submit(asyncio.run, coro).result()
