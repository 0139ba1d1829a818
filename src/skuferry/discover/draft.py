"""A proposal on its way to a file: its text, and what it shows (the proposal, then the
preview of that very text read back through the loader, the sources and the mapper)."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from skuferry.discover import read
from skuferry.discover.model import Proposal, Sample
from skuferry.discover.preview import lines, preview
from skuferry.discover.render import render, summary


@dataclass(frozen=True)
class Draft:
    """Where the config goes and what it was made from; ``text`` and ``show`` per proposal."""

    sample: Sample
    output: Path
    base_url: str | None
    command: str
    env: Mapping[str, str]

    @property
    def folder(self) -> Path:
        return self.output.parent.absolute()

    def read_note(self) -> str:
        """How much of the source was read, for the config's header."""
        count = len(self.sample.records)
        kind = self.sample.kind or "the"
        if self.sample.complete:
            return f"It read {count:,} records, the whole source, through the {kind} source."
        return (
            f"It read the first {count:,} records through the {kind} source "
            "(the sync reads them all)."
        )

    def text(self, proposal: Proposal) -> str:
        return render(
            proposal,
            base_url=self.base_url,
            state_path=f"{self.output.stem}.db",
            origin=self.sample.origin,
            read=self.read_note(),
            command=self.command,
        )

    def show(self, proposal: Proposal) -> list[str]:
        """The proposal, then the preview of its config (a CMS asked only with its key).

        A remote file's preview reads the sample's local copy of its start in place of
        the URL (the loaded config is the one written; only where it reads differs).
        """
        settings = read.load(
            tomllib.loads(self.text(proposal)),
            folder=self.folder,
            env=self.env,
            origin=str(self.output),
        )
        if self.sample.stand_in is not None:
            copy = settings.source.model_copy(update={"path": Path(self.sample.stand_in)})
            settings = settings.model_copy(update={"source": copy})
        ask_cms = bool(self.base_url) and bool(self.env.get("SKUFERRY_API_KEY", "").strip())
        shown = preview(settings, limit=max(len(self.sample.records), 1), cms=ask_cms)
        if self.sample.stand_in is not None and not self.sample.complete:
            shown.whole = False  # the copy ends where the download stopped, not the file
        return [*summary(proposal), *lines(shown, whole_known=self.sample.complete)]
