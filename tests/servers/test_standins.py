"""The stand-ins a user starts (``skuferry sandbox --pim NAME``) and the docs' blocks.

docs/connectors.md shows, for each system, the lines ``sandbox --pim`` prints; here they
are compared with what the command's own function gives, so the page cannot drift. The
connector tests (tests/integration/test_connectors.py) run those same environments.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from skuferry.sandbox.pims.standins import PORTS, SYSTEMS, stand_in, try_lines

DOCS = Path(__file__).resolve().parents[2] / "docs" / "connectors.md"
_BLOCK = re.compile(
    r"### Try (?P<title>.+?) locally\n.*?```sh\n.*?```\n\n```sh\n(?P<body>.*?)```", re.S
)


def _blocks() -> dict[str, list[str]]:
    text = DOCS.read_text(encoding="utf-8")
    found = {}
    for match in _BLOCK.finditer(text):
        lines = match.group("body").strip().splitlines()
        name = lines[-1].rsplit("/", 1)[-1].removesuffix(".toml")
        found[name] = lines
    return found


def test_every_system_has_a_try_block() -> None:
    assert sorted(_blocks()) == sorted(SYSTEMS)


@pytest.mark.parametrize("name", SYSTEMS)
def test_the_docs_block_is_what_the_command_prints(name: str, tmp_path: Path) -> None:
    standin = stand_in(name, products=3, port=0, workdir=tmp_path)
    with standin.running():
        lines = try_lines(
            standin, api_url="http://127.0.0.1:8765", api_key="sandbox-key", workdir=tmp_path
        )
        bound = [server.url.rsplit(":", 1)[1] for server in standin.servers()]
    text = "\n".join(lines).replace(str(tmp_path), "/tmp/skuferry-try")
    docs_ports = [str(PORTS[name]), str(PORTS[name] + 10)]
    for port, shown in zip(bound, docs_ports, strict=False):
        text = text.replace(f"127.0.0.1:{port}", f"127.0.0.1:{shown}")
    assert _blocks()[name] == text.splitlines()


def test_a_stand_in_serves_its_catalog_and_says_what_its_example_reads(tmp_path: Path) -> None:
    standin = stand_in("shopify", products=7, workdir=tmp_path)
    with standin.running():
        env = standin.environment()
        assert env["SKUFERRY_SOURCE__URL"] == standin.server.url
        assert env["SHOPIFY_TOKEN"]
        assert len(standin.keys) == 7


def test_every_try_block_says_how_long_and_how_to_hurry_or_move_it() -> None:
    """Issue 40 items 20 and 21: the walkthrough's sandbox holds port 8765, and a try at
    the sandbox's 60 writes a minute takes minutes."""
    text = DOCS.read_text(encoding="utf-8")
    sections = re.split(r"\n### ", text.split("## Try a connector locally", 1)[1])[1:]
    assert len(sections) == len(SYSTEMS)
    for section in sections:
        said = " ".join(section.split())
        assert "About 4 minutes at the sandbox's 60 writes a minute" in said, section[:40]
        assert "--write-per-minute 600 --workspace-write-per-minute 600" in said
        assert "SKUFERRY_BUDGET__WRITE_PER_MINUTE=600" in said
        assert "stop the walkthrough's sandbox first, or add `--port 8766`" in said
    presets = DOCS.parent / "presets"
    for name in ("shopify", "woocommerce", "magento"):
        page = (presets / f"{name}.md").read_text(encoding="utf-8")
        said = " ".join(page.split("## Try it locally", 1)[1].split("\n## ", 1)[0].split())
        assert "It takes a few seconds" in said and "--write-per-minute 600" in said, name
        assert "walkthrough's `skuferry sandbox`" in said and "--port 8766" in said, name
