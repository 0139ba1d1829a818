"""``skuferry init`` on a terminal, through click's CliRunner: the prompts take the user's
answers (another key, a field dropped), and nothing is written before the user says so."""

from __future__ import annotations

import stat
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from skuferry import cli

CSV = "SKU;Artikelnummer;Bezeichnung;VK-Preis;Bestand\n" + "".join(
    f"A-{i};{i:05d};Bohrer {i} mm;{i},50;{i * 3}\n" for i in range(1, 7)
)


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "_on_terminal", lambda: True)
    monkeypatch.delenv("SKUFERRY_API_KEY", raising=False)


def _run(folder: Path, answers: str) -> tuple[int, str]:
    (folder / "artikel.csv").write_text(CSV, encoding="utf-8")
    written = folder / "skuferry.toml"
    result = CliRunner().invoke(
        cli.main,
        ["init", "--from", str(folder / "artikel.csv"), "--output", str(written)],
        input=answers,
    )
    text = written.read_text(encoding="utf-8") if written.exists() else ""
    if written.exists():
        assert stat.S_IMODE(written.stat().st_mode) == 0o600
    return result.exit_code, result.output + "\n=====\n" + text


def test_the_user_picks_the_other_key_and_drops_a_field(terminal: None, tmp_path: Path) -> None:
    # the key question (two article numbers), then: drop stock, write
    code, out = _run(tmp_path, "2\nd\nstock\nw\n")
    assert code == 0, out
    output, text = out.split("\n=====\n")
    assert "two columns could be the key" in output
    assert "Write this config?" in output
    data = tomllib.loads(text)
    fields = data["mapping"]["fields"]
    assert "stock" not in fields
    assert fields["sku"] in ("SKU", "Artikelnummer")
    asked = output.split("Your choice")[0]
    second = asked.split("  2. ")[1].split(":")[0]
    assert fields["sku"] == second  # the answer, not the proposal
    assert "was stock; left out by you" in text


def test_quitting_writes_nothing(terminal: None, tmp_path: Path) -> None:
    code, out = _run(tmp_path, "skip\nq\n")
    assert code == 0, out
    output, text = out.split("\n=====\n")
    assert text == "" and "nothing written" in output


def test_the_proposal_and_its_preview_come_before_the_question(
    terminal: None, tmp_path: Path
) -> None:
    code, out = _run(tmp_path, "1\nw\n")
    assert code == 0, out
    output = out.split("\n=====\n")[0]
    assert output.index("as read and as the mapping makes them") < output.index(
        "Write this config?"
    )
    assert output.index("A dry run of") < output.index("Write this config?")
    assert output.index("Write this config?") < output.index("wrote ")
