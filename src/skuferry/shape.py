"""The source's shape is a contract: what a run relied on, and the one rule that judges a pull.

An export changes shape without warning: an ERP upgrade renames a column, a PIM plugin
moves a JSON field, Excel strips the leading zeros of every key. Read as data, each
would reach the CMS as nulls, defaults or duplicates. So every whole pull is described
(``Shape``): for each mapped field, the column or path it reads and in how many records
it gave a value; the header; the key's format. The state keeps the last one
(``state.shapes``) and the next pull is judged against it here, by ``decide``, before
anything is planned for writing (after dlt's ``apply_schema_contract``: one function
decides, the callers never restate it):

- a mapped column that is not in the header, unless the learnt shape says it was
  already absent (a change accepted before);
- a field read record by record (a path, or a column of a source without a header)
  that gave a value before and gives none in a whole pull;
- a key column or key path that gives no key at all;
- keys whose format changed wholesale (leading zeros, digits only, case, length: a
  feature every learnt key had that no key has now, or the other way round);

each breaks the contract: the run stops with nothing written (``ShapeChanged``, exit 2)
until the export is fixed or the new shape is accepted on purpose
(``skuferry accept-shape``). ``--force`` passes the ratio guards, never this.

Keys that vanished and came back reformatted (``renamed_keys``: equal after an obvious
normalisation) are the same products under new keys: creating them would duplicate
the catalog, so the plan refuses them, whatever the ``[gone]`` action.

Pure: plain data in, plain data out, no I/O.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, NamedTuple

FORMAT_VERSION = 1  # the stored layout of a Shape (``to_json``)
MIN_FORMAT_KEYS = 20  # a key format is compared only between pulls of at least this many keys
SAMPLE = 10_000  # records whose every field is looked at; after them only the unfound ones

Kind = Literal["column", "path", "sent"]  # "sent": known only from what was last sent


class FieldRead(NamedTuple):
    """What one mapped field reads (the mapping says it): a shape is learnt from these."""

    target: str
    kind: str  # "column" or "path"
    name: str  # the column, or the path as written
    search: Callable[[Any], Any] | None  # a path's compiled search
    join: str | None = None  # the [[join]] its path reads: judged on partnered records only


@dataclass(frozen=True, slots=True)
class FieldShape:
    """What one mapped field read in a pull, and how often it gave a value."""

    target: str  # the product field
    kind: Kind  # a column of the header, a path (or a column of records without a header)
    name: str  # the column or the path, as the mapping writes it
    given: int = 0  # records (of ``looked``) where it gave a value
    looked: int = 0  # records looked at
    present: bool = True  # the column is in the header (a source with one), or given > 0
    gone: bool = False  # accepted as gone: left alone on the CMS while it gives nothing

    @property
    def reads(self) -> str:
        if self.kind == "sent":
            return "its source"
        return f"{self.kind} {self.name!r}"

    def share(self) -> str:
        if not self.looked:
            return "not looked at"
        return f"{self.given} of {self.looked} record(s)"


# the features of a key whose wholesale change is a change of format, by name
_FEATURES = ("leading_zeros", "digits", "upper", "lower")
_FEATURE_WORDS = {
    "leading_zeros": "start with a zero",
    "digits": "are digits only",
    "upper": "hold an upper-case letter",
    "lower": "hold a lower-case letter",
}


@dataclass(frozen=True, slots=True)
class KeyFormat:
    """The format of a pull's keys: how many have each feature, and their lengths."""

    keys: int = 0
    shortest: int = 0
    longest: int = 0
    leading_zeros: int = 0  # a zero before another character ("00123", "0A1")
    digits: int = 0  # digits only
    upper: int = 0  # an upper-case letter
    lower: int = 0  # a lower-case letter
    examples: tuple[str, ...] = ()  # the first few keys, for messages

    @classmethod
    def of(cls, keys: Iterable[str]) -> KeyFormat:
        counter = KeyCounter()
        for key in keys:
            counter.add(key)
        return counter.format()

    def describe(self) -> str:
        if not self.keys:
            return "no keys"
        parts = [
            f"{self.shortest} character(s)"
            if self.shortest == self.longest
            else f"{self.shortest}-{self.longest} characters"
        ]
        for name in _FEATURES:
            count = getattr(self, name)
            if count == self.keys:
                parts.append(f"all {_FEATURE_WORDS[name]}")
            elif count == 0:
                parts.append(f"none {_FEATURE_WORDS[name]}")
        shown = ", ".join(repr(k) for k in self.examples[:3])
        return f"{self.keys} key(s), " + ", ".join(parts) + (f" (e.g. {shown})" if shown else "")


class KeyCounter:
    """Builds a ``KeyFormat`` from keys as they stream by (the first ``SAMPLE`` count)."""

    __slots__ = ("_examples", "_f", "_long", "_n", "_short")

    def __init__(self) -> None:
        self._n = 0
        self._short = 0
        self._long = 0
        self._f = [0, 0, 0, 0]
        self._examples: list[str] = []

    @property
    def full(self) -> bool:
        return self._n >= SAMPLE

    def add(self, key: str) -> None:
        size = len(key)
        if self._n == 0:
            self._short = self._long = size
        elif size < self._short:
            self._short = size
        elif size > self._long:
            self._long = size
        self._n += 1
        f = self._f
        if size > 1 and key[0] == "0":
            f[0] += 1
        if key.isdigit():
            f[1] += 1
        else:
            if key != key.lower():  # a cased letter that is upper case
                f[2] += 1
            if key != key.upper():
                f[3] += 1
        if len(self._examples) < 3:
            self._examples.append(key)

    def format(self) -> KeyFormat:
        f = self._f
        return KeyFormat(
            self._n, self._short, self._long, f[0], f[1], f[2], f[3], tuple(self._examples)
        )


@dataclass(frozen=True, slots=True)
class Shape:
    """The shape of one pull (or of the last one the state learnt)."""

    source: str  # the source's name, for messages
    header: tuple[str, ...] | None  # None: the records have no header (JSON, an API, XML)
    fields: tuple[FieldShape, ...]
    key: KeyFormat = field(default_factory=KeyFormat)
    records: int = 0  # records looked at
    whole: bool = False  # a full pull read to its end: what it lacks, the source lacks
    names: tuple[str, ...] = ()  # a source without a header: the records' top-level names seen

    def field(self, target: str) -> FieldShape | None:
        for found in self.fields:
            if found.target == target:
                return found
        return None

    def gone(self) -> frozenset[str]:
        """The fields accepted as gone: while they give nothing they are left alone."""
        return frozenset(f.target for f in self.fields if f.gone)

    def to_json(self) -> str:
        data = asdict(self)
        data["version"] = FORMAT_VERSION
        return json.dumps(data, ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Shape | None:
        """The stored shape; None when it cannot be read (another layout): nothing learnt."""
        try:
            data = json.loads(text)
            if data.pop("version", None) != FORMAT_VERSION:
                return None
            return cls(
                source=str(data["source"]),
                header=None if data["header"] is None else tuple(data["header"]),
                fields=tuple(FieldShape(**f) for f in data["fields"]),
                key=KeyFormat(**{**data["key"], "examples": tuple(data["key"]["examples"])}),
                records=int(data["records"]),
                whole=bool(data["whole"]),
                names=tuple(data.get("names", ())),
            )
        except (ValueError, KeyError, TypeError):
            return None

    @classmethod
    def from_sent(cls, given: Iterable[str]) -> Shape:
        """What a state written before shapes were kept knows: the fields it last sent
        with a value. Each counts as a field that gave values (``kind`` "sent")."""
        fields = tuple(FieldShape(t, "sent", "", given=1, looked=1) for t in sorted(given))
        return cls(source="the products last sent", header=None, fields=fields)


@dataclass(frozen=True, slots=True)
class Change:
    """One difference between the learnt shape and a pull's."""

    target: str | None  # the product field it is about (None: the header, the keys)
    text: str  # one line, naming what was read and what is there now
    breaking: bool
    kind: str = "field"  # "field", "header" or "keys": what changed


@dataclass(frozen=True, slots=True)
class ShapeVerdict:
    """``decide``'s answer: the changes found, and whether the contract holds."""

    changes: tuple[Change, ...] = ()

    @property
    def breaking(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.breaking)

    @property
    def holds(self) -> bool:
        return not self.breaking

    def to_json(self) -> str:
        return json.dumps([asdict(c) for c in self.changes], ensure_ascii=False)

    def message(self, source: str, *, accept: str) -> str:
        """The refusal: every breaking change, then the two ways on."""
        lines = [f"the shape of {source} changed: nothing was written, nothing marked gone"]
        lines.extend(f"  - {c.text}" for c in self.breaking)
        lines.append(
            "Fix the export, or accept the new shape on purpose: "
            f"{accept} (a field the source no longer gives is then left alone on the CMS; "
            "--force does not accept a shape)"
        )
        return "\n".join(lines)


def decide(learned: Shape | None, seen: Shape, *, key: str) -> ShapeVerdict:
    """The contract's one rule: the changes from ``learned`` (None: nothing learnt yet) to
    ``seen``, each breaking or not. ``key``: the target field that is the product key."""
    changes: list[Change] = []
    for now in seen.fields:
        before = learned.field(now.target) if learned is not None else None
        if seen.header is not None and now.kind == "column":
            changes.extend(_column(now, before, seen, key=key))
        else:
            changes.extend(_by_record(now, before, seen, key=key))
    if learned is not None:
        changes.extend(_header(learned, seen, key=key))
        changes.extend(_key_format(learned.key, seen.key))
    return ShapeVerdict(tuple(changes))


def _column(
    now: FieldShape, before: FieldShape | None, seen: Shape, *, key: str
) -> Iterator[Change]:
    if now.present:
        if before is not None and before.kind == "column" and not before.present:
            yield Change(now.target, f"column {now.name!r} is back in the header", False)
        return
    header = seen.header or ()
    where = f"the header of {seen.source}"
    if now.target == key:
        yield Change(
            now.target,
            f"the key {key!r} reads column {now.name!r}, which is not in {where} "
            f"({_closest(now.name, header)}the header: {', '.join(header) or 'empty'})",
            True,
        )
        return
    if before is not None and not before.present and before.name == now.name:
        return  # absent before too: accepted, or never there (and never sent)
    was = "no longer has" if before is not None and before.present else "does not have"
    yield Change(
        now.target,
        f"field {now.target!r} reads column {now.name!r}, which {where} {was} "
        f"({_closest(now.name, header)}the header: {', '.join(header) or 'empty'})",
        True,
    )


def _by_record(
    now: FieldShape, before: FieldShape | None, seen: Shape, *, key: str
) -> Iterator[Change]:
    if not seen.whole or not now.looked or now.given:
        if before is not None and before.gone and now.given:
            yield Change(now.target, f"{now.reads} gives values again", False)
        return
    names = seen.names
    has = f"({_closest(now.name, names)}the records hold: {_listed(names)})"
    if now.target == key:
        yield Change(
            now.target,
            f"the key {key!r} reads {now.reads}, which no record of {seen.source} gives {has}",
            True,
        )
        return
    if before is None or not before.given or before.gone:
        return  # it never gave a value, or its going was accepted
    yield Change(
        now.target,
        f"field {now.target!r} reads {now.reads}, which gave a value in "
        f"{before.share()} of the last pull and in none of the {now.looked} now {has}",
        True,
    )


def _header(learned: Shape, seen: Shape, *, key: str) -> Iterator[Change]:
    """Columns added or dropped that no field reads: told, not breaking."""
    del key
    if learned.header is None or seen.header is None or learned.header == seen.header:
        return
    read = {f.name for f in seen.fields if f.kind == "column"}
    before, now = set(learned.header), set(seen.header)
    added = [c for c in seen.header if c not in before and c not in read]
    dropped = [c for c in learned.header if c not in now and c not in read]
    if added:
        yield Change(None, f"new column(s) no field reads: {_listed(added)}", False, "header")
    if dropped:
        text = f"column(s) no field read are gone: {_listed(dropped)}"
        yield Change(None, text, False, "header")
    if not added and not dropped and before == now:
        yield Change(None, "the columns are in another order", False, "header")


def _key_format(before: KeyFormat, now: KeyFormat) -> Iterator[Change]:
    if before.keys < MIN_FORMAT_KEYS or now.keys < MIN_FORMAT_KEYS:
        return
    changed: list[str] = []
    for name in _FEATURES:
        was, is_ = getattr(before, name), getattr(now, name)
        if was == before.keys and is_ == 0:
            changed.append(f"every key {_FEATURE_WORDS[name]} before, none now")
        elif was == 0 and is_ == now.keys:
            changed.append(f"no key {_FEATURE_WORDS[name]} before, every one now")
    if now.shortest > before.longest or now.longest < before.shortest:
        changed.append("no key is as long as before")
    if changed:
        yield Change(
            None,
            f"the key's format changed: {'; '.join(changed)} (before: {before.describe()}; "
            f"now: {now.describe()})",
            True,
            "keys",
        )


def learn(learned: Shape | None, seen: Shape, *, accepted: bool) -> Shape:
    """The shape the state keeps after a whole pull: ``seen``, with what was accepted as
    gone. A field that broke the contract and was accepted is gone from now on; one gone
    before stays gone while it gives nothing."""
    verdict = decide(learned, seen, key="")
    broke = {c.target for c in verdict.breaking if c.target is not None}
    fields = []
    for now in seen.fields:
        before = learned.field(now.target) if learned is not None else None
        headed = seen.header is not None and now.kind == "column"
        gives = now.present and (now.given > 0 or headed)
        was_gone = before is not None and before.gone
        gone = not gives and ((accepted and now.target in broke) or was_gone)
        fields.append(replace(now, gone=gone))
    return replace(seen, fields=tuple(fields))


def normal(key: str) -> str:
    """A key after the obvious normalisation: blanks around it, case and leading zeros
    ("  00123 ", "ABC-1" and "abc-1" become "123" and "abc-1")."""
    text = key.strip().casefold()
    stripped = text.lstrip("0")
    return stripped or text[:1]


def renamed_keys(vanished: Iterable[str], created: Sequence[str]) -> Iterator[tuple[str, str]]:
    """(vanished key, created key) pairs equal after ``normal`` or after taking off a prefix
    or suffix that two or more created keys share over a vanished key. A vanished key is
    paired once, and only when its normal form names no other vanished key."""
    index: dict[str, str | None] = {}
    for gone in vanished:
        form = normal(gone)
        index[form] = None if form in index else gone  # None: two keys, one form: ambiguous
    if not index or not created:
        return
    prefixes, suffixes = _affixes(index, created)
    paired: set[str] = set()
    for new in created:
        for form in _forms(new, prefixes, suffixes):
            was = index.get(form)
            if was is not None and was not in paired:
                paired.add(was)
                yield was, new
                break


def _forms(key: str, prefixes: Sequence[str], suffixes: Sequence[str]) -> Iterator[str]:
    yield normal(key)
    for prefix in prefixes:
        if key.startswith(prefix) and len(key) > len(prefix):
            yield normal(key[len(prefix) :])
    for suffix in suffixes:
        if key.endswith(suffix) and len(key) > len(suffix):
            yield normal(key[: -len(suffix)])


def _affixes(
    index: Mapping[str, str | None], created: Sequence[str], *, sample: int = 64
) -> tuple[list[str], list[str]]:
    """Prefixes and suffixes that turn at least two of the first ``sample`` created keys
    into a vanished one."""
    prefixes: Counter[str] = Counter()
    suffixes: Counter[str] = Counter()
    for key in created[:sample]:
        for cut in range(1, len(key)):
            if index.get(normal(key[cut:])) is not None:
                prefixes[key[:cut]] += 1
            if index.get(normal(key[:-cut])) is not None:
                suffixes[key[-cut:]] += 1
    return (
        [p for p, n in prefixes.most_common(3) if n >= 2],
        [s for s, n in suffixes.most_common(3) if n >= 2],
    )


def renamed_message(pairs: Sequence[tuple[str, str]], total: int, *, accept: str) -> str:
    """The refusal of keys that came back reformatted, naming three examples."""
    shown = ", ".join(f"{old!r} -> {new!r}" for old, new in pairs[:3])
    return (
        f"keys changed format: {total} product(s) would be created under a key that equals "
        f"a key that left the source, after trimming blanks, case, leading zeros or a "
        f"common prefix or suffix (e.g. {shown}): nothing was written, nothing marked gone. "
        "Fix the export (a spreadsheet strips leading zeros), or accept the new keys on "
        f"purpose: {accept} (the products keep their CMS ids and get the new keys)"
    )


def _closest(name: str, among: Iterable[str]) -> str:
    import difflib  # only for a change of shape's message: off the start of every run

    found = difflib.get_close_matches(name, list(among), n=3, cutoff=0.4)
    return f"closest: {', '.join(repr(f) for f in found)}; " if found else ""


def _listed(names: Iterable[str], limit: int = 12) -> str:
    items = list(names)
    shown = ", ".join(items[:limit])
    return (shown + (f", ... ({len(items)} in all)" if len(items) > limit else "")) or "none"
