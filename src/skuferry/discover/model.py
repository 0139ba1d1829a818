"""The nouns of ``init``: what was found and how sure, the proposal, its open questions."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

# How sure a finding is: "sure" (the sample leaves no doubt), "likely" (the evidence
# points one way, another reading is possible), "unsure" (a default, or a guess the
# user is asked or told about).
Sure = Literal["sure", "likely", "unsure"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing detected: what (``subject``), the value, how sure, and the evidence."""

    subject: str
    value: str
    sure: Sure
    why: str

    def line(self) -> str:
        return f"{self.subject}: {self.value} ({self.sure}: {self.why})"


@dataclass(frozen=True, slots=True)
class Column:
    """One column of the sample: a flat row's cell, or a nested record's leaf.

    ``name`` is how the user knows it (the header, or the leaf's dotted place);
    ``path`` the JMESPath that reads it from a nested record (None: ``column = name``);
    ``values`` its value in each sampled record, None where absent or null.
    """

    name: str
    path: str | None
    values: tuple[Any, ...]

    def spec(self) -> dict[str, Any]:
        """Where a field reads this column: ``{"column": ...}`` or ``{"path": ...}``."""
        return {"column": self.name} if self.path is None else {"path": self.path}


@dataclass(frozen=True, slots=True)
class Sample:
    """What the edge read: the ``[source]`` table it found, and the first records.

    ``records`` are the records' fields as the configured source yields them (the very
    reader the sync will use); ``complete`` says whether they are the whole source.
    """

    source: dict[str, Any]
    records: tuple[dict[str, Any], ...]
    findings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()
    complete: bool = False
    unreadable: tuple[str, ...] = ()  # the source's own rejections in the sample, as said
    origin: str = ""  # what was read, for messages (a path or a URL without secrets)
    kind: str = ""  # the source type as loaded (a preset's table names none)
    # a local copy of a remote file's start (cut at its last whole record): the preview
    # reads it in place of the URL, so nothing reads the whole of a big remote file
    stand_in: str | None = None


@dataclass(frozen=True, slots=True)
class FieldChoice:
    """One product field: where it reads and as what (a ``[mapping.fields]`` table), and why."""

    target: str
    spec: dict[str, Any]
    why: str
    sure: Sure = "likely"
    source_name: str = ""  # the column's name as the user knows it


@dataclass(frozen=True, slots=True)
class KeyCandidate:
    """A column that could be the key (unique and non-empty in the sample), and its merits."""

    column: Column
    score: float
    why: str


@dataclass(frozen=True, slots=True)
class Question:
    """What the sample cannot decide: asked on a terminal, said in the config otherwise.

    ``options`` are (label, what choosing it means); ``chosen`` is the option the
    proposal takes until the user says otherwise (None: nothing is taken, e.g. a
    column left unmapped).
    """

    topic: str  # "key", "field:<target>", "date"
    text: str
    options: tuple[tuple[str, str], ...] = ()
    chosen: int | None = None


@dataclass(frozen=True)
class Proposal:
    """A whole config proposed from a sample, with the reasons for each choice."""

    source: dict[str, Any]
    key: KeyCandidate | None
    candidates: tuple[KeyCandidate, ...]
    fields: tuple[FieldChoice, ...]
    unmapped: tuple[tuple[str, str], ...]  # (column, what it holds)
    findings: tuple[Finding, ...]
    mapping: dict[str, Any] = field(default_factory=dict)  # group_by, inherit, each
    questions: tuple[Question, ...] = ()
    notes: tuple[str, ...] = ()
    known: str | None = None  # the export or API recognised (a preset's name)
    key_field: str = "sku"
    key_spec: dict[str, Any] | None = None  # a known mapping's own key spec (else the column's)
    # what the answers need to re-fit a column: the sample's columns, its decimal mark
    columns: tuple[Column, ...] = ()
    hint: str | None = None
    count: int = 0

    def field(self, target: str) -> FieldChoice | None:
        return next((f for f in self.fields if f.target == target), None)

    def with_fields(self, fields: tuple[FieldChoice, ...]) -> Proposal:
        return replace(self, fields=fields)
