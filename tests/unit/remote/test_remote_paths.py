"""net/paths.py: the one "is this source path a remote file?" rule, and the places that ask it.

One table of paths as operators write them (POSIX, Windows, URLs of every scheme);
then the config, the loader's path resolution and the freshness check each agree
with the table, since they all ask the rule.
"""

from __future__ import annotations

import re
from pathlib import Path, PureWindowsPath
from typing import Any

import pytest

from skuferry.config.load import settings_from_dict
from skuferry.config.schema import FileSourceSettings
from skuferry.errors import ConfigError
from skuferry.net.paths import is_remote, remote_scheme, url_scheme
from skuferry.service.freshness import source_file

# path, its URL scheme (None: a file path), its remote scheme (None: not a remote file)
TABLE: list[tuple[Any, str | None, str | None]] = [
    ("products.csv", None, None),
    ("exports/products.csv", None, None),
    ("/srv/exports/products.csv", None, None),
    ("~/exports/products.csv", None, None),
    ("$EXPORTS/products.csv", None, None),
    ("C:\\export.csv", None, None),
    ("C:/export.csv", None, None),
    ("C://export.csv", None, None),  # a drive letter, not a one-letter scheme
    ("d:\\ERP\\out\\products.csv", None, None),
    ("\\\\fileserver\\share\\products.csv", None, None),  # a UNC path
    ("exports/http://x.csv", None, None),  # a URL inside a path is not a URL
    ("https://erp.example.com/exports/products.csv.gz", "https", "https"),
    ("HTTPS://ERP.example.com/p.csv", "https", "https"),
    ("http://127.0.0.1:8080/p.csv", "http", "http"),
    ("sftp://sync@files.example.com:2222/out/products.csv", "sftp", "sftp"),
    ("file:///srv/exports/products.csv", "file", None),
    ("ftp://files.example.com/p.csv", "ftp", None),
    ("s3+https://bucket/p.csv", "s3+https", None),
    (Path("/srv/exports/products.csv"), None, None),
    (PureWindowsPath("C:\\export.csv"), None, None),
    (None, None, None),
]


@pytest.mark.parametrize(("path", "scheme", "remote"), TABLE)
def test_the_rule(path: Any, scheme: str | None, remote: str | None) -> None:
    assert url_scheme(path) == scheme
    assert remote_scheme(path) == remote
    assert is_remote(path) is (remote is not None)


def _settings(tmp_path: Path, path: str, **tables: Any) -> Any:
    source = {"type": "csv", "path": path, "allow_insecure_http": True}
    return settings_from_dict(
        {
            "api": {"base_url": "https://cms.example.com", "api_key": "k" * 12},
            "source": {**source, **tables.pop("source", {})},
            "state": {"path": str(tmp_path / "s.db")},
            **tables,
        },
        base_dir=tmp_path,
    )


@pytest.mark.parametrize(
    ("path", "scheme", "remote"),
    [row for row in TABLE if isinstance(row[0], str) and "$" not in row[0] and "~" not in row[0]],
)
def test_the_config_and_the_service_ask_the_rule(
    tmp_path: Path, path: str, scheme: str | None, remote: str | None
) -> None:
    if scheme is not None and remote is None:
        with pytest.raises(
            ConfigError, match=re.escape(f"https://, http:// or sftp:// URL, not {scheme}://")
        ):
            _settings(tmp_path, path)
        return
    extra = {"sftp_known_hosts": "kh", "sftp_key_file": "k"} if remote == "sftp" else {}
    settings = _settings(tmp_path, path, source=extra)
    source = settings.source
    assert source.remote_scheme() == remote
    if remote is None:  # a file path, anchored at the config's folder
        assert source.path == tmp_path / path
        assert source_file(settings) == tmp_path / path
    else:  # a URL stays as written, and is no local file to watch or stat
        assert source.path == path
        assert source_file(settings) is None


def test_a_file_url_is_refused_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="give a local file as a plain path"):
        _settings(tmp_path, "file:///srv/exports/products.csv")


def test_watching_needs_a_local_file(tmp_path: Path) -> None:
    watched = {"schedule": {"watch": True}}
    assert _settings(tmp_path, "C:\\export.csv", **watched).schedule.watch
    with pytest.raises(ConfigError, match=r"schedule\.watch"):
        _settings(tmp_path, "https://erp.example.com/p.csv", **watched)


TEXT_PATHS = [row for row in TABLE if isinstance(row[0], str) and not {"$", "~"} & set(row[0])]


@pytest.mark.parametrize(("path", "scheme", "remote"), [r for r in TEXT_PATHS if r[1] == r[2]])
def test_skuferry_source_path_asks_the_rule_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: Any, scheme: str | None, remote: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    extra = {"sftp_known_hosts": "kh", "sftp_key_file": "k"} if remote == "sftp" else {}
    settings = settings_from_dict(
        {
            "api": {"base_url": "https://cms.example.com", "api_key": "k" * 12},
            "source": {"type": "csv", "path": "ignored.csv", **extra},
            "state": {"path": str(tmp_path / "s.db")},
        },
        base_dir=tmp_path,
        env={"SKUFERRY_SOURCE_PATH": path},
    )
    expected = path if remote else (tmp_path / path).absolute()
    assert isinstance(settings.source, FileSourceSettings)
    assert settings.source.path == expected
