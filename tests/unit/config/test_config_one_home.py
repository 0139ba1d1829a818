"""One home for each config decision the loader and the quick lane share (issue 30): the
secret rules (the lane's refusals are the loader's, in its words), the mask, and a load
that reads each secret file once."""

from __future__ import annotations

import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

from skuferry.config import raw
from skuferry.config.load import load_settings, settings_from_dict
from skuferry.config.schema import HttpSourceSettings


def _write(tmp_path: Path, text: str) -> Path:
    config = tmp_path / "skuferry.toml"
    config.write_text(text, encoding="utf-8")
    config.chmod(0o600)
    return config


# --- each secret file read once -------------------------------------------------------

_WATCHED: set[str] = set()
_OPENED: list[str] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _WATCHED and str(args[0]) in _WATCHED:
        _OPENED.append(str(args[0]))


sys.addaudithook(_audit)  # for the process's life: it counts only while _WATCHED is set

SECRETS = """
[api]
base_url = "http://127.0.0.1:9"
api_key_file = "api_key"

[source]
type = "http"
url = "http://127.0.0.1:9/items"
token_file = "token"
items_path = "items"

[mapping.fields]
sku = "sku"

[daemon]
hook_secret_file = "hook"
"""


def test_a_load_reads_each_secret_file_once(tmp_path: Path) -> None:
    """The API key and a source token are read once each; a secret only the daemon uses is
    not read at all (its mode is checked, not its content); the quick lane's refusals are
    worked out only when the lane asks for them."""
    for name in ("api_key", "token", "hook"):
        (tmp_path / name).write_text(f"{name}-value\n", encoding="utf-8")
        (tmp_path / name).chmod(0o600)
    config = _write(tmp_path, SECRETS)
    _WATCHED.update(str(tmp_path / name) for name in ("api_key", "token", "hook"))
    try:
        settings = load_settings(config, env={})
        full = sorted(_OPENED)
        _OPENED.clear()
        assert raw.read(config, {}).refused == ()
        lane = sorted(_OPENED)
    finally:
        _WATCHED.clear()
        _OPENED.clear()
    assert isinstance(settings.source, HttpSourceSettings)
    assert full == [str(tmp_path / "api_key"), str(tmp_path / "token")]
    assert lane == [], "the lane's reading opens none again: the files are as they were read"


def test_a_full_start_opens_each_secret_file_once_and_a_rotated_one_again(
    tmp_path: Path,
) -> None:
    """Issue 40 item 24: the load checked the source's token, the source read it again, and
    a quick lane that declined read the key before the full start did (up to four opens).
    Now ``secret_rules.read_secret_file`` reads a file once while it stays as it was."""
    from skuferry.config.secrets import read_secret
    from skuferry.service.quick import parse
    from skuferry.service.quick import read as lane_read
    from skuferry.sources.auth import api_credentials

    for name in ("api_key", "token", "hook"):
        (tmp_path / name).write_text(f"{name}-value-{tmp_path.name}\n", encoding="utf-8")
        (tmp_path / name).chmod(0o600)
    config = _write(
        tmp_path, SECRETS.replace('token_file = "token"', 'token_file = "token"\nauth = "bearer"')
    )
    (tmp_path / "skuferry.db").touch()  # the lane reads only beside a state file
    _WATCHED.update(str(tmp_path / name) for name in ("api_key", "token", "hook"))
    try:
        call = parse(["sync", "-c", str(config)], {})
        assert call is not None and lane_read(call, {}) is not None  # the lane, declining
        settings = load_settings(config, env={})  # the full start
        assert isinstance(settings.source, HttpSourceSettings)
        headers, _auth = api_credentials(settings.source)  # the source opening
        assert headers["Authorization"] == f"Bearer token-value-{tmp_path.name}"
        once = sorted(_OPENED)
        (tmp_path / "token").write_text("rotated-token\n", encoding="utf-8")  # rotated
        _OPENED.clear()
        rotated = read_secret(inline=None, file=tmp_path / "token", env_name=None, key="token")
        again = sorted(_OPENED)
    finally:
        _WATCHED.clear()
        _OPENED.clear()
    assert once == [str(tmp_path / "api_key"), str(tmp_path / "token")]
    assert rotated is not None and rotated.get_secret_value() == "rotated-token"
    assert again == [str(tmp_path / "token")], "a rewritten file is read again"


def test_the_printed_config_masks_its_typed_secrets_only() -> None:
    """One mask for the raw reading and the settings: on the settings, by type, so a
    mapped field named like a secret key shows its column, and a decimal stays a number
    (the skip decision digests this)."""
    settings = settings_from_dict(
        {
            "api": {"base_url": "http://u:pw@127.0.0.1:9", "api_key": "sk-1"},
            "source": {
                "type": "csv",
                "path": "https://127.0.0.1/c.csv",
                "headers": {"Authorization": "Bearer t-1", "Accept": "text/csv"},
            },
            "mapping": {
                "fields": {
                    "sku": "SKU",
                    "token": "Token",
                    "price": {"column": "P", "type": "decimal", "min": 0},
                }
            },
        },
        base_dir=Path("/srv"),
    )
    shown = settings.redacted()
    assert (
        shown["api"]["api_key"] == "***" and shown["api"]["base_url"] == "http://u:***@127.0.0.1:9"
    )
    assert shown["source"]["headers"] == {"Authorization": "***", "Accept": "text/csv"}
    assert shown["source"]["path"] == "https://127.0.0.1/c.csv"
    fields = shown["mapping"]["fields"]
    assert fields["token"] == "Token" and fields["price"]["min"] == Decimal(0)
    assert isinstance(fields["price"]["min"], Decimal)


def test_final_newline_and_short_rows_are_declared_once() -> None:
    """Issue 40 item 24: the settings and the sources each declared these; the sources now
    take the settings' types (``config.schema``), so a new value is added in one place."""
    import typing

    from skuferry.config.schema import FinalNewline, ShortRows
    from skuferry.sources import csv, jsonl, torn

    src = Path(raw.__file__).resolve().parents[1]
    text = "\n".join(p.read_text(encoding="utf-8") for p in src.rglob("*.py"))
    for values in typing.get_args(FinalNewline), typing.get_args(ShortRows):
        spelled = "Literal[" + ", ".join(f'"{v}"' for v in values) + "]"
        assert text.count(spelled) == 1, spelled
    for module in (csv, jsonl, torn):
        assert vars(module)["FinalNewline"] is FinalNewline, module.__name__
    assert vars(csv)["ShortRows"] is ShortRows
