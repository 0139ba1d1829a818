"""``skuferry check [--sample N]`` as an operator runs it: the first records as skuferry
reads them and what the mapping makes of them, against the sandbox as the API."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from skuferry.sandbox import Sandbox
from tests.integration.conftest import KEY, catalog_rows

pytestmark = pytest.mark.integration

Run = Callable[..., subprocess.CompletedProcess[str]]


def _block(stdout: str, heading: str) -> str:
    """The indented JSON-like block printed under the line starting with ``heading``."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading)) + 1
    end = next(i for i in range(start, len(lines)) if lines[i] == "  }")
    return "\n".join(lines[start : end + 1])


def test_check_shows_the_first_record_as_read_and_as_mapped(
    sandbox: Sandbox,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Run,
) -> None:
    write_catalog(catalog_rows(3))
    config = write_config(sandbox.url)

    result = run_cli("check", "--config", str(config))

    assert result.returncode == 0, result.stderr
    out = result.stdout
    first = catalog_rows(1)[0]
    read = json.loads(_block(out, "record 1 (line 2), as read from the source:"))
    assert read == first, "the CSV row as read: every value is text"
    assert '"Price": "' + first["Price"] + '"' in out, "text is shown in quotes"
    mapped = _block(out, "  mapped to the payload sent for key 'SKU-00001':")
    assert f'"price": {first["Price"]},' in mapped, "a decimal is shown as a bare number"
    assert json.loads(mapped) == {
        "sku": "SKU-00001",
        "name": first["Name"],
        "price": float(first["Price"]),
        "stock": int(first["Stock"]),
    }
    assert "record 2" not in out, "one record unless --sample says more"
    assert "api: ok" in out
    assert KEY not in out + result.stderr


def test_check_sample_n_shows_nested_records_paths_and_rejections(
    sandbox: Sandbox, tmp_path: Path, write_config: Callable[..., Path], run_cli: Run
) -> None:
    items = [
        {"identifier": "079685", "values": {"name": [{"locale": "en_US", "scope": None,
         "data": "Anvil"}], "price": [{"locale": None, "scope": None,
         "data": [{"amount": "899.00", "currency": "USD"}, {"amount": "849.50",
                                                             "currency": "EUR"}]}]}},
        {"identifier": "079686", "values": {"name": [{"locale": "de_DE", "scope": None,
         "data": "Hammer"}]}},
        {"identifier": "079687", "values": {"name": [{"locale": "en_US", "data": "Tongs"}]}},
    ]  # fmt: skip
    (tmp_path / "items.jsonl").write_text(
        "".join(json.dumps(item) + "\n" for item in items), encoding="utf-8"
    )
    config = write_config(sandbox.url)
    text = config.read_text(encoding="utf-8")
    start, end = text.index("[source]"), text.index("[budget]")
    config.write_text(
        text[:start]
        + '[source]\ntype = "jsonl"\npath = "items.jsonl"\n\n'
        + '[mapping]\nkey = "sku"\n[mapping.fields]\n'
        + 'sku = { path = "identifier" }\n'
        + "name = { path = \"values.name[?locale=='en_US'].data | [0]\", required = true }\n"
        + "price = { path = \"values.price[0].data[?currency=='EUR'].amount | [0]\", "
        + 'type = "decimal", default = "0.00" }\n'
        + 'currency = { value = "EUR" }\n\n'
        + text[end:],
        encoding="utf-8",
    )

    result = run_cli("check", "--sample", "2", "--config", str(config))

    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "source: 2 valid record(s), 1 rejected" in out
    nested = json.loads(_block(out, "record 1 (line 1), as read from the source:"))
    assert nested == items[0], "the nested record as skuferry sees it"
    mapped = json.loads(_block(out, "  mapped to the payload sent for key '079685':"))
    assert mapped == {"sku": "079685", "currency": "EUR", "name": "Anvil", "price": 849.5}
    assert '"price": 849.50' in out, "the digits as the source wrote them"
    assert "record 2 (line 2), as read from the source:" in out
    assert (
        "  mapped: rejected:\n"
        f"  {tmp_path / 'items.jsonl'} line 2, path \"values.name[?locale=='en_US'].data | [0]\": "
        "is required but the path finds nothing"
    ) in out
    assert "record 3" not in out


def test_check_sample_0_shows_no_record(
    sandbox: Sandbox,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Run,
) -> None:
    write_catalog(catalog_rows(2))
    result = run_cli("check", "--sample", "0", "--config", str(write_config(sandbox.url)))
    assert result.returncode == 0, result.stderr
    assert "2 valid record(s)" in result.stdout
    assert "record 1" not in result.stdout


def test_check_sample_refuses_a_negative_count(run_cli: Run) -> None:
    result = run_cli("check", "--sample", "-1", "--config", "nowhere.toml")
    assert result.returncode == 2
    assert "--sample" in result.stderr
