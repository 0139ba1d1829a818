"""The origin rule (net/origins.py) and the remote-file settings that rely on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from skuferry.config.load import settings_from_dict
from skuferry.errors import ConfigError, SourceError
from skuferry.net.origins import (
    Origin,
    check_same_origin,
    insecure_http_problem,
    is_loopback_host,
    origin,
    parse_allowed,
)


def test_origin_is_scheme_host_and_port_with_defaults() -> None:
    assert origin("https://PIM.example.com/api?x=1") == Origin("https", "pim.example.com", 443)
    assert origin("http://127.0.0.1:8080/a") == Origin("http", "127.0.0.1", 8080)
    assert origin("sftp://erp@files.example.com/drop/x.csv") == ("sftp", "files.example.com", 22)
    assert str(origin("http://[::1]:81/")) == "http://[::1]:81"
    with pytest.raises(ValueError, match="not an absolute URL"):
        origin("/relative/path")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("10.0.0.1", False),
        ("example.com", False),
        ("localhost.example.com", False),
        ("127.0.0.1.nip.io", False),
    ],
)
def test_only_loopback_literals_count_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


def test_plain_http_is_refused_off_the_box_unless_allowed() -> None:
    problem = insecure_http_problem("http://erp.example.com/x.csv", allow_insecure_http=False)
    assert problem and "clear text" in problem and "allow_insecure_http" in problem
    assert insecure_http_problem("http://erp.example.com/x", allow_insecure_http=True) is None
    assert insecure_http_problem("http://127.0.0.1:9/x", allow_insecure_http=False) is None
    assert insecure_http_problem("https://erp.example.com/x", allow_insecure_http=False) is None


def test_leaving_the_origin_is_refused_naming_both() -> None:
    base = "https://pim.example.com/export.csv"
    check_same_origin(base, "https://PIM.example.com:443/other")  # same origin
    with pytest.raises(SourceError) as info:
        check_same_origin(base, "https://cdn.example.net/export.csv")
    assert "https://cdn.example.net:443" in str(info.value)
    assert "https://pim.example.com:443" in str(info.value)
    check_same_origin(base, "https://cdn.example.net/x", parse_allowed(["https://cdn.example.net"]))


def test_https_to_http_is_refused_even_when_listed() -> None:
    with pytest.raises(SourceError, match="clear text"):
        check_same_origin("https://a.example/x", "http://a.example/x", ["http://a.example"])


# -- the remote-file settings ------------------------------------------------------------------


def _source(tmp_path: Path, **source: Any) -> Any:
    settings = settings_from_dict(
        {
            "api": {"base_url": "http://127.0.0.1:9", "api_key": "k" * 12},
            "source": {"type": "csv", **source},
            "state": {"path": str(tmp_path / "s.db")},
        },
        base_dir=tmp_path,
    )
    return settings.source


def test_a_url_path_stays_a_url_and_a_local_path_resolves(tmp_path: Path) -> None:
    remote = _source(tmp_path, path="https://erp.example.com/exports/products.csv.gz")
    assert remote.path == "https://erp.example.com/exports/products.csv.gz"
    assert remote.remote_scheme() == "https"
    local = _source(tmp_path, path="products.csv")
    assert local.path == tmp_path / "products.csv" and local.remote_scheme() is None


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"path": "http://erp.example.com/p.csv"}, "clear text"),
        ({"path": "ftp://erp.example.com/p.csv"}, "https://, http:// or sftp://"),
        ({"path": "https://u:pw@erp.example.com/p.csv"}, "no password in the URL"),
        ({"path": "p.csv", "headers": {"Authorization": "x"}}, "only applies to an http"),
        ({"path": "https://e.example/p.csv", "sftp_key_file": "k"}, "only applies to an sftp"),
        ({"path": "https://e.example/p.csv", "allowed_origins": ["nope"]}, "'nope'"),
        (
            {"path": "sftp://e.example/p.csv", "sftp_known_hosts": "kh", "sftp_key_file": "k"},
            "sftp://user@host",
        ),
        ({"path": "sftp://u@e.example/p.csv", "sftp_known_hosts": "kh"}, "sftp_key_file"),
    ],
)
def test_remote_file_settings_refuse_what_cannot_work(
    tmp_path: Path, source: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _source(tmp_path, **source)


def test_plain_http_is_accepted_with_allow_insecure_http(tmp_path: Path) -> None:
    source = _source(tmp_path, path="http://erp.example.com/p.csv", allow_insecure_http=True)
    assert source.remote_scheme() == "http"


def test_sftp_key_and_known_hosts_files_resolve_against_the_config_folder(tmp_path: Path) -> None:
    source = _source(
        tmp_path,
        path="sftp://erp@files.example.com:2222/drop/p.csv",
        sftp_known_hosts="known_hosts",
        sftp_key_file="keys/id_ed25519",
    )
    assert source.sftp_known_hosts == tmp_path / "known_hosts"
    assert source.sftp_key_file == tmp_path / "keys" / "id_ed25519"


def test_header_values_stay_out_of_the_settings_repr(tmp_path: Path) -> None:
    source = _source(
        tmp_path,
        path="https://erp.example.com/p.csv",
        headers={"Authorization": "Bearer hdr-secret-Wq3z"},
    )
    assert "hdr-secret-Wq3z" not in repr(source) and "hdr-secret-Wq3z" not in str(source)
