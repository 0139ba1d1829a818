"""Every shipped example works as its comments say, from a fresh clone.

- every file an example names beside it (its export, join partners, query or lookup
  files) is shipped;
- no example holds a key: they take it from ``SKUFERRY_API_KEY`` (or a file), so a run
  from the checkout, where files are 0644, warns about nothing;
- the shop-export examples sync their shipped sample against the sandbox, exit 0.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from skuferry.sandbox import Sandbox
from tests.integration.conftest import KEY, WORKSPACE

pytestmark = pytest.mark.integration

Run = Callable[..., subprocess.CompletedProcess[str]]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TOMLS = sorted(EXAMPLES.rglob("*.toml"))


def _named_files(data: dict[str, Any]) -> Iterator[str]:
    """The export, each join partner, and every ``*_file`` anywhere in the tables."""
    tables = [data.get("source", {}), *data.get("join", [])]
    yield from (t["path"] for t in tables if isinstance(t.get("path"), str))
    yield from _key_files(data)


def _key_files(data: Any) -> Iterator[str]:
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, str) and key.endswith("_file"):
                yield value
            else:
                yield from _key_files(value)
    elif isinstance(data, list):
        for item in data:
            yield from _key_files(item)


def _is_beside(value: str) -> bool:
    """A relative local path (absolute paths, URLs and $VARs are the user's own)."""
    return not (value.startswith(("/", "$", "~")) or "://" in value)


def test_there_are_examples() -> None:
    assert len(TOMLS) >= 10


@pytest.mark.parametrize("config", TOMLS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_file_an_example_names_is_shipped(config: Path) -> None:
    data = tomllib.loads(config.read_text(encoding="utf-8"))
    missing = [
        value
        for value in _named_files(data)
        if _is_beside(value) and not (config.parent / value).exists()
    ]
    assert missing == [], f"{config.name} names files that are not shipped"


@pytest.mark.parametrize("config", TOMLS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_no_example_holds_a_key(config: Path) -> None:
    data = tomllib.loads(config.read_text(encoding="utf-8"))
    assert "api_key" not in data.get("api", {}), "take the key from SKUFERRY_API_KEY"


@pytest.mark.parametrize(
    ("name", "created"),
    [("woocommerce.toml", 7), ("magento.toml", 4), ("shopify.toml", None)],
)
def test_a_shop_example_syncs_its_sample_from_a_0644_checkout(
    name: str, created: int | None, sandbox: Sandbox, tmp_path: Path, run_cli: Run
) -> None:
    clone = tmp_path / "clone"
    shutil.copytree(EXAMPLES, clone)
    config = clone / name
    text = config.read_text(encoding="utf-8").replace("http://127.0.0.1:8765", sandbox.url)
    state = tmp_path / "state.db"
    text = "\n".join(
        f'path = "{state}"' if line.startswith('path = "/tmp/skuferry-example') else line
        for line in text.splitlines()
    )
    config.write_text(text + "\n", encoding="utf-8")
    config.chmod(0o644)  # as git checks it out
    result = run_cli("sync", "--json", "--config", str(config), env={"SKUFERRY_API_KEY": KEY})
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    held = sandbox.products(WORKSPACE)
    assert summary["created"] == len(held) > 0
    if created is not None:
        assert summary["created"] == created
    assert "chmod" not in result.stderr
