"""A daemon that runs on an older config than its file: a reload failed (SIGHUP with a
broken file). The daemon keeps the config it had, which is right, and says so where an
operator looks: ``/healthz`` (a ``degraded`` entry naming the file, the line and the
key, never the message), ``skuferry_config_reload_failed``, a line on the page, and the
log's ``daemon.reload.failed`` (every problem in full). Liveness is not touched: the
schedule goes on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skuferry import errors

# ConfigError's problems are "<file>: line N: message" (the TOML cannot be read) or
# "<file>: at 'a.b': message" (a value); <file> may be a $SKUFERRY_ variable instead.
_AT_LINE = re.compile(r"^(?P<file>.+?): line (?P<line>\d+): ")
_AT_KEY = re.compile(r"^(?P<file>.+?): at '(?P<key>[^']*)': ")
_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")


@dataclass(frozen=True, slots=True)
class Degraded:
    """The reload that failed: where to look, and every problem (for the page and log)."""

    file: str
    line: int | None
    key: str | None
    problems: tuple[str, ...]
    since: float  # unix time of the failed reload

    def as_json(self) -> dict[str, Any]:
        """What ``/healthz`` shows: where, never what (messages may carry values)."""
        return {
            "reason": "the config reload failed; running on the previous config",
            "file": self.file,
            "line": self.line,
            "key": self.key,
            "since": self.since,
        }

    def where(self) -> str:
        """``acme.toml line 3 (at 'budget.write_per_minute')``, as much as is known."""
        parts = [self.file]
        if self.line is not None:
            parts.append(f"line {self.line}")
        if self.key:
            parts.append(f"(at '{self.key}')")
        return " ".join(parts)


def of_failure(config_file: Path | None, exc: errors.SkuferryError, since: float) -> Degraded:
    """Where a failed reload's first problem is: its file, its line (the TOML parser's, or
    the line of the key at fault), its key."""
    problems = tuple(exc.problems) if isinstance(exc, errors.ConfigError) else (str(exc),)
    file = str(config_file) if config_file is not None else "the config"
    line: int | None = None
    key: str | None = None
    first = problems[0] if problems else ""
    if found := _AT_LINE.match(first):
        file, line = found["file"], int(found["line"])
    elif found := _AT_KEY.match(first):
        file, key = found["file"], found["key"] or None
        if key and not file.startswith("$"):
            line = key_line(Path(file), key)
    return Degraded(file, line, key, problems, since)


def key_line(path: Path, dotted: str) -> int | None:
    """The line of ``dotted`` (``budget.write_per_minute``, ``join.0.key``) in the TOML
    file at ``path``: its key's line under its table's header, else the header's; None
    when neither is there (a table left out, a value from the environment)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    parts = dotted.split(".")
    table: list[str] = []
    arrays: dict[str, int] = {}  # [[join]]: the how-many-th, as a key path counts it
    header_at: int | None = None
    for number, text in enumerate(lines, 1):
        header = _HEADER.match(text)
        if header:
            table = _names(header.group(1))
            if text.lstrip().startswith("[["):
                index = arrays.get(".".join(table), -1) + 1
                arrays[".".join(table)] = index
                table = [*table, str(index)]
            if header_at is None and table == parts[: len(table)]:
                header_at = number
            continue
        if "=" not in text or text.lstrip().startswith("#"):
            continue
        key = [*table, *_names(text.split("=", 1)[0])]
        if key == parts[: len(key)]:
            return number
    return header_at


def _names(dotted: str) -> list[str]:
    return [name.strip().strip("\"'") for name in dotted.split(".")]
