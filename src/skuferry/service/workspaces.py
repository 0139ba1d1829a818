"""Which workspaces a fleet serves: ``--workspaces DIR [--shard K/N]``.

DIR holds one ``<name>.toml`` per workspace, each a complete config; the name is the
file's stem and the default of its ``[metrics] labels.workspace``. Files whose name
starts with ``_`` or ``.`` are not workspaces.

Shards: ``--shard K/N`` keeps the workspaces whose name's SHA-256, read as a
number, is K modulo N; the same on every machine and Python, unlike ``hash()``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from skuferry import errors
from skuferry.config.load import load_settings
from skuferry.config.schema import Settings

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")  # a URL segment and a label value


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count``: the workspaces this process takes."""

    index: int = 0
    count: int = 1

    @classmethod
    def parse(cls, text: str) -> Shard:
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if match is None:
            raise errors.UsageError(f"--shard {text!r}: expected K/N, e.g. 0/3")
        index, count = int(match[1]), int(match[2])
        if count < 1 or index >= count:
            raise errors.UsageError(f"--shard {text!r}: K must be 0 to N-1 and N at least 1")
        return cls(index, count)

    def takes(self, name: str) -> bool:
        return shard_of(name, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of(name: str, count: int) -> int:
    """The shard of ``name`` among ``count``: stable across processes, machines, versions."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest(), "big") % count


def workspace_files(directory: Path, shard: Shard = Shard()) -> dict[str, Path]:
    """``{name: path}`` of the workspaces in ``directory`` that ``shard`` takes, by name."""
    if not directory.is_dir():
        raise errors.UsageError(f"--workspaces {directory}: not a directory")
    found = {}
    for path in sorted(directory.glob("*.toml")):
        name = path.stem
        if name.startswith(("_", ".")) or not path.is_file():
            continue
        if shard.takes(name):
            found[name] = path
    return found


def load_workspace(
    name: str, path: Path | None, load: Callable[[Path | None], Settings] = load_settings
) -> Settings:
    """The workspace's settings; ``[metrics] labels.workspace`` defaults to ``name``."""
    if not NAME.fullmatch(name):
        raise errors.ConfigError(
            [f"{path}: a workspace's file name must be letters, digits, '.', '_' or '-'"]
        )
    settings = load(path)
    if "workspace" in settings.metrics.labels:
        return settings
    labels = {**settings.metrics.labels, "workspace": name}
    metrics = settings.metrics.model_copy(update={"labels": labels})
    return settings.model_copy(update={"metrics": metrics})
