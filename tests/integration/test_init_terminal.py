"""``skuferry init`` on a real terminal (a pseudo-terminal): it asks before writing, takes the
answers typed, and writes what was chosen."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests.init_exports import write_german
from tests.integration.conftest import clean_env

pytestmark = pytest.mark.integration


class Terminal:
    """A process on a pseudo-terminal: read what it shows, type answers."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            args, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, env=clean_env(COLUMNS="120")
        )
        os.close(slave)
        self.seen = ""  # what it showed since the last text expected
        self.shown = ""  # ... up to that text

    def expect(self, text: str, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while text not in self.seen:
            left = end - time.monotonic()
            assert left > 0, f"{text!r} did not come; the terminal shows:\n{self.seen[-3000:]}"
            ready, _, _ = select.select([self.master], [], [], min(left, 1))
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # the process ended and closed the terminal
                    chunk = b""
                if not chunk and self.proc.poll() is not None:
                    raise AssertionError(f"ended before {text!r}:\n{self.seen[-3000:]}")
                self.seen += chunk.decode(errors="replace")
        at = self.seen.index(text) + len(text)
        self.shown, self.seen = self.seen[:at], self.seen[at:]

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\r")

    def wait(self) -> int:
        code = self.proc.wait(timeout=60)
        os.close(self.master)
        return code


def test_init_asks_on_a_terminal_before_writing(tmp_path: Path) -> None:
    write_german(tmp_path)
    term = Terminal([sys.executable, "-m", "skuferry", "init", "--from", "Artikel.csv"], tmp_path)
    try:
        term.expect("Write this config?")
        assert not (tmp_path / "skuferry.toml").exists()  # nothing before the answer
        assert "A dry run of the whole source" in term.shown
        term.type("d")
        term.expect("Drop which field")
        term.type("weight")
        term.expect("Write this config?")
        assert "'Gewicht': was weight; left out by you" in term.shown  # shown again
        term.type("w")
        term.expect("wrote skuferry.toml")
        assert term.wait() == 0
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
            term.proc.wait(timeout=30)
    data = tomllib.loads((tmp_path / "skuferry.toml").read_text(encoding="utf-8"))
    assert "weight" not in data["mapping"]["fields"]
    assert data["mapping"]["fields"]["sku"] == "Artikelnummer"
