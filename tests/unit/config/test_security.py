"""Security rules: clear text, private CAs, secret files, redaction, origin pinning, page size."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import certifi
import httpx
import pytest
import respx
from click.testing import CliRunner
from structlog.testing import capture_logs

from skuferry import errors, logs
from skuferry.cli import main
from skuferry.config import security
from skuferry.config.load import load_settings, settings_from_dict
from skuferry.config.schema import HttpSourceSettings
from skuferry.config.secrets import read_secret
from skuferry.errors import ConfigError, SourceError
from skuferry.sources import http as http_source
from skuferry.sources.http import HttpSource
from skuferry.sources.wiring import Wiring
from tests.fakes import write_config_file

KEY = "sk-sec-Vn4pR8tQ2w"
TOKEN = "pim-sec-Jd5kM1xZ7"
PIM = "https://pim.example.com/api/products"


def config(**tables: dict[str, Any]) -> dict[str, Any]:
    base: dict[str, Any] = {
        "api": {"base_url": "https://cms.example.com", "api_key": KEY},
        "source": {"type": "csv", "path": "catalog.csv"},
        "state": {"path": "state.db"},
    }
    for name, table in tables.items():  # a source replaces the csv one; others are merged
        base[name] = table if name == "source" else {**base.get(name, {}), **table}
    return base


def problems(data: dict[str, Any], tmp_path: Path | None = None) -> list[str]:
    try:
        settings_from_dict(data, base_dir=tmp_path)
    except ConfigError as exc:
        return exc.problems
    return []


# --- clear text ----------------------------------------------------------------------


def test_http_base_url_to_a_remote_host_is_refused_saying_why() -> None:
    found = problems(config(api={"base_url": "http://cms.example.com"}))
    assert found == [
        "<dict>: at 'api.base_url': http:// to cms.example.com sends credentials and catalog "
        "data in clear text; use https://, or set allow_insecure_http = true in this table if "
        "the network is trusted"
    ]


def test_allow_insecure_http_accepts_it() -> None:
    assert (
        problems(config(api={"base_url": "http://cms.example.com", "allow_insecure_http": True}))
        == []
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080",
        "http://127.9.9.9",
        "http://[::1]:80",
        "http://localhost:8080",
        "https://cms.example.com",
    ],
)
def test_loopback_literals_and_https_need_no_permission(url: str) -> None:
    assert problems(config(api={"base_url": url})) == []


def test_a_name_that_resolves_to_loopback_is_still_refused() -> None:
    # only literals count: what a name resolves to today may change tomorrow
    found = problems(config(api={"base_url": "http://localhost.localdomain"}))
    assert len(found) == 1 and "at 'api.base_url': http:// to localhost.localdomain" in found[0]


def test_http_source_url_in_clear_text_is_refused_unless_allowed() -> None:
    source = {"type": "http", "url": "http://pim.example.com/products"}
    found = problems(config(source=source))
    assert len(found) == 1 and found[0].startswith("<dict>: at 'source.url': http:// to pim")
    assert problems(config(source={**source, "allow_insecure_http": True})) == []


def test_a_bad_allowed_origin_is_named() -> None:
    found = problems(
        config(source={"type": "http", "url": PIM, "allowed_origins": ["pim.example.com"]})
    )
    assert len(found) == 1 and "at 'source.allowed_origins': 'pim.example.com'" in found[0]


# --- private CAs ---------------------------------------------------------------------


def test_ca_bundle_must_be_a_pem_file_of_ca_certificates(tmp_path: Path) -> None:
    (tmp_path / "junk.pem").write_text("not a certificate\n", encoding="utf-8")
    found = problems(
        config(
            api={"ca_bundle": "missing.pem"},
            source={"type": "http", "url": PIM, "ca_bundle": "junk.pem"},
        ),
        tmp_path,
    )
    assert found == [
        f"<dict>: at 'api.ca_bundle': '{tmp_path / 'missing.pem'}' does not exist",
        f"<dict>: at 'source.ca_bundle': '{tmp_path / 'junk.pem'}' holds no PEM CA certificate "
        "(-----BEGIN CERTIFICATE-----)",
    ]
    assert problems(config(api={"ca_bundle": certifi.where()})) == []


# --- secret files and the config file ------------------------------------------------


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def secret_file(path: Path, mode: int) -> Path:
    path.write_text("s3cret-in-a-file\n", encoding="utf-8")
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("table", "key"),
    [("api", "api_key_file"), ("source", "token_file"), ("source", "password_file")],
)
def test_a_world_readable_secret_file_is_refused_with_exit_2(
    here: Path, table: str, key: str
) -> None:
    secret = secret_file(here / "secret", 0o644)
    source = {
        "type": "http",
        "url": PIM,
        "auth": "bearer" if key == "token_file" else "basic",
        "username": "u",
    }
    data = config(source=source)
    if table == "api":
        data["api"] = {"base_url": "https://cms.example.com", key: str(secret)}
        data["source"] = {"type": "csv", "path": "c.csv"}
    else:
        data["source"][key] = str(secret)
    with pytest.raises(ConfigError) as refused:
        settings_from_dict(data, env={})
    assert refused.value.exit_code == errors.EXIT_USAGE
    assert refused.value.problems == [
        f"<dict>: at '{table}.{key}': '{secret}' holds a secret and every user of this machine "
        f"may read it (mode 0644); run: chmod 600 {secret}"
    ]
    secret.chmod(0o640)  # the group may read it (systemd's LoadCredential, a service group)
    settings_from_dict(data, env={})


def write_config(here: Path, text: str, mode: int) -> Path:
    return write_config_file(here, text, name="config.toml", mode=mode)


MINIMAL = (
    '[api]\nbase_url = "https://cms.example.com"\n{line}\n[source]\ntype = "csv"\npath = "c.csv"\n'
)


def test_a_readable_config_with_an_inline_key_gets_a_warning_with_the_chmod(here: Path) -> None:
    path = write_config(here, MINIMAL.format(line=f'api_key = "{KEY}"'), 0o644)
    with capture_logs() as events:
        load_settings(path, env={})
    warned = [e for e in events if e["event"] == "config.file.readable"]
    assert len(warned) == 1
    assert warned[0]["message"].startswith(f"config file {path} holds a secret (api.api_key)")
    assert f"run: chmod 600 {path}" in warned[0]["message"]
    assert KEY not in json.dumps(events)


@pytest.mark.parametrize(
    ("line", "mode"),
    [(f'api_key = "{KEY}"', 0o600), ("", 0o644)],
    ids=["private-file", "no-inline-secret"],
)
def test_no_warning_for_a_private_config_or_one_without_secrets(
    here: Path, line: str, mode: int
) -> None:
    path = write_config(here, MINIMAL.format(line=line), mode)
    with capture_logs() as events:
        load_settings(path, env={"SKUFERRY_API_KEY": KEY})
    assert not [e for e in events if e["event"] == "config.file.readable"]


def test_secret_headers_and_url_passwords_count_as_inline_secrets(here: Path) -> None:
    raw = {
        "source": {"type": "http", "url": PIM, "headers": {"X-Api-Key": "abc"}},
        "api": {"base_url": "https://u:pw@cms.example.com"},
    }
    path = write_config(here, "", 0o604)
    warning = security.inline_secret_warning(path, raw)
    assert warning is not None and "(source.headers, api.base_url)" in warning


# --- redaction -----------------------------------------------------------------------


def json_logs() -> io.StringIO:
    out = io.StringIO()
    logs.configure(level="debug", json=True, stream=out)
    return out


def test_every_secret_of_the_config_is_masked_in_log_lines_and_tracebacks() -> None:
    settings = settings_from_dict(
        config(
            source={
                "type": "sql",
                "url": "postgresql://erp:Pg-pass-8812@db.example.com/erp",
                "table": "t",
            }
        )
    )
    headers = {"X-Api-Key": "hdr-secret-5531", "Authorization": "Bearer hdr-bearer-7714"}
    found = set(security.secret_values(settings)) | set(security._secrets_in(headers, "headers"))
    assert {KEY, "Pg-pass-8812", "hdr-secret-5531", "hdr-bearer-7714"} <= found
    logs.add_secrets(found)
    out = json_logs()
    try:
        raise RuntimeError(f"connect failed for {KEY} / Pg-pass-8812")
    except RuntimeError:
        logs.get("t").error("t.crash", detail={"auth": "Bearer hdr-bearer-7714"}, exc_info=True)
    text = out.getvalue()
    for secret in (KEY, "Pg-pass-8812", "hdr-bearer-7714"):
        assert secret not in text
    event = json.loads(text)
    assert "RuntimeError: connect failed for *** / ***" in event["exception"]


def test_every_key_of_a_keys_list_is_registered_with_the_redactor() -> None:
    keys = ["sk-first-Lk29dh", "sk-second-Po83nc"]
    settings = settings_from_dict(config(), env={"SKUFERRY_API_KEYS": ",".join(keys)})
    assert set(keys) <= set(security.secret_values(settings))
    assert logs.redact_text(f"{keys[0]} {keys[1]}") == "*** ***"


def test_a_token_read_from_a_file_or_the_environment_is_masked_from_then_on(
    tmp_path: Path,
) -> None:
    token_file = secret_file(tmp_path / "token", 0o600)
    read_secret(inline=None, file=token_file, env_name=None, key="token")
    read_secret(
        inline=None,
        file=None,
        env_name="SFTP_PW",
        key="sftp_password",
        env={"SFTP_PW": "sftp-pw-9034"},
    )
    assert logs.redact_text("s3cret-in-a-file and sftp-pw-9034") == "*** and ***"


def test_secret_headers_stay_out_of_the_source_settings_repr() -> None:
    settings = HttpSourceSettings.model_validate(
        {"type": "http", "url": PIM, "headers": {"X-Api-Key": "hdr-repr-6620"}}
    )
    assert "hdr-repr-6620" not in repr(settings) + str(settings)


def test_short_values_are_not_treated_as_secrets() -> None:
    logs.add_secrets(["abc", ""])
    assert logs.redact_text("abc") == "abc"


@pytest.fixture
def crashing_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug deep in a pull, whose message carries both secrets (as real bugs sometimes do)."""

    def crash(self: HttpSource) -> Iterator[Any]:
        try:
            raise KeyError(f"api key {KEY} missing from {self._api.headers!r}")
        except KeyError as exc:
            raise RuntimeError(f"page walk broke with token {TOKEN}") from exc

    monkeypatch.setattr(http_source.HttpSource, "records", crash)


@pytest.mark.usefixtures("crashing_source")
@pytest.mark.parametrize("debug", [True, False])
def test_a_crash_traceback_does_not_contain_any_secret(here: Path, debug: bool) -> None:
    path = write_config(
        here,
        (
            '[api]\nbase_url = "http://127.0.0.1:9"\n\n'
            '[source]\ntype = "http"\nurl = "http://127.0.0.1:9/products"\nauth = "bearer"\n'
            'token_env = "PIM_TOKEN"\n'
        ),
        0o600,
    )
    env = {"SKUFERRY_API_KEY": KEY, "PIM_TOKEN": TOKEN, "SKUFERRY_CONFIG": ""}
    args = ["--debug"] if debug else []
    result = CliRunner().invoke(main, [*args, "sync", "--config", str(path)], env=env)
    assert result.exit_code == errors.EXIT_SOFTWARE
    output = result.output
    assert KEY not in output and TOKEN not in output
    assert "RuntimeError: page walk broke with token ***" in output
    if debug:
        assert "Traceback (most recent call last)" in output
        assert "KeyError" in output  # the cause is shown too, masked
    else:
        assert "Traceback" not in output and "run with --debug" in output


# --- origin pinning and page size on the http source (respx) --------------------------


def source(**options: Any) -> HttpSource:
    settings = HttpSourceSettings.model_validate(
        {
            "type": "http",
            "url": PIM,
            "auth": "bearer",
            "token": TOKEN,
            "max_retries": 0,
            **options,
        }
    )
    return HttpSource(settings, Wiring(sleep=lambda _s: None))


@respx.mock
def test_https_to_http_is_refused_even_when_listed() -> None:
    respx.get(PIM).respond(json={"items": [], "next": "http://pim.example.com/api/products?p=2"})
    downgraded = respx.get("http://pim.example.com/api/products")
    s = source(next_path="next", items_path="items", allowed_origins=["http://pim.example.com"])
    with pytest.raises(SourceError, match="https to http"):
        list(s.records())
    assert not downgraded.called


@respx.mock
def test_a_redirect_to_another_origin_is_not_followed() -> None:
    respx.get(PIM).respond(302, headers={"Location": "https://evil.example.net/x"})
    evil = respx.get("https://evil.example.net/x")
    with pytest.raises(SourceError) as refused:
        list(source().records())
    assert "https://evil.example.net:443" in str(refused.value)
    assert "https://pim.example.com:443" in str(refused.value)
    assert not evil.called


class Endless(httpx.SyncByteStream):
    """A body of 1 MiB chunks that never ends, counting what was pulled from it."""

    def __init__(self) -> None:
        self.chunks = 0

    def __iter__(self) -> Iterator[bytes]:
        while True:
            self.chunks += 1
            yield b"[" + b" " * (1024 * 1024 - 1)


@respx.mock
def test_a_page_beyond_max_page_bytes_is_refused_while_streaming() -> None:
    body = Endless()  # a "2 GB page": only what fits under the bound is ever read
    respx.get(PIM).mock(return_value=httpx.Response(200, stream=body))
    with pytest.raises(SourceError, match=r"larger than max_page_bytes \(4194304 bytes\)"):
        list(source(max_page_bytes=4 * 1024 * 1024).records())
    assert body.chunks <= 5


@respx.mock
def test_a_declared_length_beyond_the_bound_is_refused_before_reading() -> None:
    respx.get(PIM).respond(200, content=b"[" + b" " * 2000 + b"]")
    with pytest.raises(SourceError, match="max_page_bytes"):
        list(source(max_page_bytes=1000).records())


@respx.mock
def test_a_page_under_the_bound_reads_as_before() -> None:
    respx.get(PIM).respond(200, json=[{"sku": "A"}])
    assert [r.fields for r in source(max_page_bytes=1000).records()] == [{"sku": "A"}]
