"""Several API keys: where they are found, in which order, and that only fingerprints show."""

from __future__ import annotations

import hashlib
import io
import json
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
import structlog

from skuferry import logs
from skuferry.config.keys import fingerprint
from skuferry.config.load import load_settings
from skuferry.errors import ConfigError
from skuferry.remote.client import RemoteClient
from tests.fakes import write_config_file

BASE = "https://cms.example.com"
KEYS = ["sk-multi-AAAA-0001", "sk-multi-BBBB-0002", "sk-multi-CCCC-0003"]
ONE = "sk-single-ZZZZ-0009"

CONFIG = f"""\
[api]
base_url = "{BASE}"
{{api}}

[source]
type = "csv"
path = "catalog.csv"
"""


def write_config(folder: Path, api: str = "") -> Path:
    text = CONFIG.replace("{api}", textwrap.dedent(api))
    return write_config_file(folder, text, name="config.toml")


def keys_of(folder: Path, api: str = "", env: dict[str, str] | None = None) -> list[str]:
    settings = load_settings(write_config(folder, api), env=env or {})
    return [key.get_secret_value() for key in settings.api_keys]


def problems_of(folder: Path, api: str = "", env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_settings(write_config(folder, api), env=env or {})
    return info.value.problems


def keys_file(folder: Path, text: str, name: str = "api_keys") -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    path.chmod(0o600)  # a readable secret file is refused (issue 13)
    return path


# -- each place ----------------------------------------------------------------------


def test_keys_file_one_per_line_with_comments_and_blank_lines(tmp_path: Path) -> None:
    keys_file(tmp_path, f"# the shop's three keys\n{KEYS[0]}\n\n  {KEYS[1]}  \n# old\n{KEYS[2]}")
    assert keys_of(tmp_path, 'api_keys_file = "api_keys"') == KEYS  # relative to the config


def test_environment_keys_comma_or_newline_separated(tmp_path: Path) -> None:
    env = {"SKUFERRY_API_KEYS": f"{KEYS[0]}, {KEYS[1]}\n{KEYS[2]},"}
    assert keys_of(tmp_path, env=env) == KEYS


def test_systemd_credential_api_keys(tmp_path: Path) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    keys_file(creds, "\n".join(KEYS) + "\n")
    assert keys_of(tmp_path, env={"CREDENTIALS_DIRECTORY": str(creds)}) == KEYS


def test_inline_list(tmp_path: Path) -> None:
    assert keys_of(tmp_path, f"api_keys = {json.dumps(KEYS[:2])}") == KEYS[:2]


def test_one_key_keeps_todays_names(tmp_path: Path) -> None:
    assert keys_of(tmp_path, f'api_key = "{ONE}"') == [ONE]
    assert keys_of(tmp_path, env={"SKUFERRY_API_KEY": ONE}) == [ONE]
    settings = load_settings(write_config(tmp_path), env={"SKUFERRY_API_KEYS": ",".join(KEYS)})
    assert settings.api_key().get_secret_value() == KEYS[0]  # the first key stands for all


# -- precedence ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("places", "expected"),
    [
        # environment > file > inline, the several-keys form first at each level
        ({"env_keys", "env_key", "file", "inline", "one", "creds"}, "env_keys"),
        ({"env_key", "file", "inline", "one", "creds"}, "env_key"),
        ({"file", "inline", "one", "creds"}, "file"),
        ({"inline", "one", "creds"}, "creds"),
        ({"inline", "one"}, "inline"),
        ({"one", "creds"}, "creds"),
        ({"one"}, "one"),
        ({"creds"}, "creds"),
    ],
)
def test_precedence(tmp_path: Path, places: set[str], expected: str) -> None:
    found = {
        "env_keys": KEYS,
        "env_key": [ONE],
        "file": KEYS[1:],
        "inline": KEYS[:1],
        "one": ["sk-inline-one-0008"],
        "creds": KEYS[2:],
    }
    creds = tmp_path / "creds"
    creds.mkdir()
    keys_file(creds, "\n".join(found["creds"]))
    keys_file(tmp_path, "\n".join(found["file"]), name="file_keys")
    env = {"CREDENTIALS_DIRECTORY": str(creds)} if "creds" in places else {}
    if "env_keys" in places:
        env["SKUFERRY_API_KEYS"] = ",".join(found["env_keys"])
    if "env_key" in places:
        env["SKUFERRY_API_KEY"] = ONE
    api = []
    if "file" in places:
        api.append('api_keys_file = "file_keys"')
    if "inline" in places:
        api.append(f"api_keys = {json.dumps(found['inline'])}")
    if "one" in places:
        api.append(f'api_key = "{found["one"][0]}"')
    assert keys_of(tmp_path, "\n".join(api), env=env) == found[expected]


# -- problems, all at once, never the key --------------------------------------------


def test_bad_keys_files_name_file_and_line_never_the_key(tmp_path: Path) -> None:
    keys_file(tmp_path, f"{KEYS[0]}\n{KEYS[1]} {KEYS[2]}\n{KEYS[0]}\n")
    problems = problems_of(tmp_path, 'api_keys_file = "api_keys"\ntimeout_s = -1')
    text = "\n".join(problems)
    assert "line 2: a key has no spaces" in text
    assert "line 3: the same key as line 1" in text
    assert "timeout_s" in text  # every problem at once
    assert not any(key in text for key in KEYS)


@pytest.mark.parametrize(
    ("content", "message"),
    [("# nothing but a comment\n\n", "holds no key"), (None, "cannot read")],
)
def test_empty_or_missing_keys_file(tmp_path: Path, content: str | None, message: str) -> None:
    if content is not None:
        keys_file(tmp_path, content)
    problems = problems_of(tmp_path, 'api_keys_file = "api_keys"')
    assert any("api.api_keys_file" in p and message in p for p in problems), problems


def test_repeated_key_in_the_environment(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, env={"SKUFERRY_API_KEYS": f"{KEYS[0]},{KEYS[0]}"})
    assert any(
        p.endswith("SKUFERRY_API_KEYS: entry 2: the same key as entry 1; list each key once")
        for p in problems
    ), problems


def test_keys_never_in_redacted_config_or_repr(tmp_path: Path) -> None:
    settings = load_settings(write_config(tmp_path), env={"SKUFERRY_API_KEYS": ",".join(KEYS)})
    shown = json.dumps(settings.redacted()) + repr(settings) + str(settings)
    assert not any(key in shown for key in KEYS)
    assert settings.redacted()["api"]["api_keys"] == ["***"] * 3


# -- fingerprints --------------------------------------------------------------------


def test_fingerprint_is_the_first_8_hex_of_sha256() -> None:
    assert fingerprint(KEYS[0]) == hashlib.sha256(KEYS[0].encode()).hexdigest()[:8]
    assert len({fingerprint(k) for k in KEYS}) == 3


@pytest.fixture
def log_stream() -> Any:
    saved = structlog.get_config()
    stream = io.StringIO()
    logs.configure(level="debug", json=True, stream=stream)
    yield stream
    structlog.configure(**saved)


def test_client_takes_turns_and_logs_name_keys_by_fingerprint(log_stream: io.StringIO) -> None:
    from pydantic import SecretStr

    router = respx.MockRouter(assert_all_called=False, assert_all_mocked=True)
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"].removeprefix("Bearer "))
        if len(seen) == 1:
            return httpx.Response(
                429,
                headers={"Retry-After": "1"},
                json={"error": {"code": "RATE_LIMITED", "message": "wait"}},
            )
        return httpx.Response(200, json={"data": {"id": "1"}, "meta": {}})

    router.get(f"{BASE}/api/v1/products/1").mock(side_effect=answer)
    with RemoteClient(
        base_url=BASE,
        api_keys=[SecretStr(k) for k in KEYS],
        transport=httpx.MockTransport(router.handler),
        sleep=lambda _s: None,
    ) as client:
        for _ in range(3):
            client.get_product("1")
    assert seen == [KEYS[0], KEYS[1], KEYS[2], KEYS[0]]  # every key in turn, the retry too
    output = log_stream.getvalue()
    events = [json.loads(line) for line in output.splitlines()]
    limited = [e for e in events if e["event"] == "api.rate_limited"]
    assert limited and limited[0]["key"] == fingerprint(KEYS[0])
    assert not any(key in output for key in KEYS)


def test_metrics_count_requests_by_key_fingerprint() -> None:
    from skuferry.models import RunSummary
    from skuferry.service.metrics import RunOutcome, parse_samples, render

    summary = RunSummary(requests_by_key={fingerprint(KEYS[0]): 5, fingerprint(KEYS[1]): 4})
    first = render({}, RunOutcome.from_summary(summary, duration_s=1, finished_at=1), None)
    text = render(
        parse_samples(first), RunOutcome.from_summary(summary, duration_s=1, finished_at=2), None
    )
    assert f'skuferry_key_requests_total{{key="{fingerprint(KEYS[0])}"}} 10' in text
    assert f'skuferry_key_requests_total{{key="{fingerprint(KEYS[1])}"}} 8' in text
    assert not any(key in text for key in KEYS)
