"""A sample -> a ``Proposal``: the source as found, the key, the fields, what is left out,
what was found and how sure, and the questions only the user can answer.

A known export or API (``known``) gets its worked example's mapping; anything else
gets a key (``key``) and fields (``fields``) chosen from the columns. The user's
answers (another key, a field dropped, a question settled) are applied by the pure
functions below, each returning a new proposal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from skuferry.discover import fields as f
from skuferry.discover import key as k
from skuferry.discover import values as v
from skuferry.discover.columns import columns as columns_of
from skuferry.discover.known import Known, recognise
from skuferry.discover.model import (
    Column,
    FieldChoice,
    Finding,
    KeyCandidate,
    Proposal,
    Question,
    Sample,
    Sure,
)
from skuferry.discover.words import FIELDS

DEFAULT_NAMES = (
    "field names: the CMS's API lists no product fields, so these are skuferry's "
    f"documented defaults (sku, {', '.join(FIELDS)}); rename a field (left of =) to "
    "the name your CMS uses"
)
MAX_UNMAPPED = 40


def top_names(records: Sequence[dict[str, Any]]) -> list[str]:
    names: dict[str, None] = {}
    for record in records:
        names.update(dict.fromkeys(record))
    return list(names)


def propose(sample: Sample, *, preset: str | None = None) -> Proposal:
    """Everything ``init`` proposes for ``sample`` (``preset``: the API's system, named)."""
    records = sample.records
    cols = columns_of(records)
    count = len(records)
    source = dict(sample.source)
    hint = f.decimal_hint(cols, delimiter=source.get("delimiter"))
    kind = sample.kind or str(source.get("type", ""))
    known = recognise(kind, top_names(records), record=source.get("record"), preset=preset)
    candidates, said = k.candidates(cols, count)
    if known is not None:
        return _known(sample, known, cols, candidates, hint)
    best = candidates[0] if candidates else None
    found = f.propose(cols, key=best.column if best else None, hint=hint, count=count)
    questions = list(found.questions)
    asked = k.question(candidates)
    if asked is not None:
        questions.insert(0, asked)
    notes = [*sample.notes, *said, *found.notes]
    if best is None:
        notes.append(
            "no column is unique and non-empty in the sample: no key proposed; "
            "[mapping] key must name one (docs/mapping.md)"
        )
    used = set(found.used) | ({best.column.name} if best else set())
    questions.extend(f.zone_questions([c for c in cols if c.name not in used]))
    notes.append(DEFAULT_NAMES)
    return Proposal(
        source=source,
        key=best,
        candidates=tuple(candidates),
        fields=found.choices,
        unmapped=_unmapped(cols, used, hint),
        findings=(*sample.findings, *value_findings(cols, hint), *_key_findings(best, candidates)),
        questions=tuple(questions),
        notes=tuple(notes),
        columns=tuple(cols),
        hint=hint,
        count=count,
    )


def value_findings(cols: Sequence[Column], hint: str | None) -> list[Finding]:
    """How the file writes numbers and dates, over all its columns."""
    out = []
    styled = [
        (c, n)
        for c in cols
        if (n := v.numbers(c.values, hint=hint)) is not None
        and not n.typed
        and (n.fraction or n.thousands)
    ]
    if styled:
        column, numbers = ([(c, n) for c, n in styled if n.thousands] or styled)[0]
        decimal, thousands = numbers.decimal, numbers.thousands
        value = f'decimal "{decimal}"' + (f', thousands "{thousands}"' if thousands else "")
        sure: Sure = "sure" if all(n.sure for _, n in styled) else "likely"
        example = v.shown(v.texts(column.values)[0])
        why = f"{len(styled)} column(s) of numbers, e.g. {column.name!r}: {example}"
        if not numbers.sure:
            why += "; the values read either way, the file's other numbers decided"
        out.append(Finding("numbers", value, sure, why))
    for column in cols:
        dates = v.dates(column.values)
        if dates is None:
            continue
        sure = "sure" if dates.sure else "unsure"
        why = f"in {column.name!r}, e.g. {v.shown(v.texts(column.values)[0])}"
        out.append(Finding("dates", dates.describe(), sure, why))
    return out


def _key_findings(best: KeyCandidate | None, candidates: Sequence[KeyCandidate]) -> list[Finding]:
    if best is None:
        return [Finding("key", "none", "unsure", "no column is unique and non-empty")]
    sure = (
        "sure"
        if best.score >= 10 and (len(candidates) < 2 or best.score - candidates[1].score > 1)
        else "likely"
    )
    why = best.why
    if len(candidates) > 1:
        why += f"; runner-up {candidates[1].column.name!r} ({candidates[1].why})"
    return [Finding("key", repr(best.column.name), sure, why)]  # type: ignore[arg-type]


def _unmapped(
    cols: Sequence[Column], used: set[str], hint: str | None
) -> tuple[tuple[str, str], ...]:
    left = [c for c in cols if c.name not in used]
    out = [(c.name, f.describe(c, hint=hint)) for c in left[:MAX_UNMAPPED]]
    if len(left) > MAX_UNMAPPED:
        out.append((f"... {len(left) - MAX_UNMAPPED} more", "see `skuferry check --sample 1`"))
    return tuple(out)


def _known(
    sample: Sample,
    known: Known,
    cols: list[Column],
    candidates: list[KeyCandidate],
    hint: str | None,
) -> Proposal:
    records = sample.records
    names = top_names(records)
    specs, notes = known.proposal(names, records)
    by_name = {c.name: c for c in cols}
    choices: list[FieldChoice] = []
    for target, given, comment in specs:
        column = by_name.get(given.get("column", ""))
        spec = _styled(target, given, column, hint, notes)
        why = comment
        choices.append(FieldChoice(target, spec, why, "sure", spec.get("column", "")))
    source = {**sample.source, **{k: v for k, v in known.source.items() if k != "record"}}
    kept = _store_views(known, records, source, notes)
    if len(kept) != len(records):  # the key is judged on the rows the filter keeps
        by_name = {c.name: c for c in columns_of([records[i] for i in kept])}
    key_choice = next((c for c in choices if c.target == known.key), None)
    key = _known_key(
        known, key_choice, by_name=by_name, candidates=candidates, count=len(kept), notes=notes
    )
    read = {c.source_name for c in choices if c.source_name}
    read |= {n for n in names if any(n in str(c.spec.get("path", "")) for c in choices)}
    read |= set(known.mapping.get("inherit", ())) | {str(known.mapping.get("group_by", ""))}
    left = [
        c for c in cols if c.name not in read and c.name.split(".")[0].split("[")[0] not in read
    ]
    questions = f.zone_questions(left)
    finding = Finding("export", known.title, "sure", f"its columns: {', '.join(known.needs)}")
    return Proposal(
        source=source,
        key=key,
        candidates=tuple(candidates),
        fields=tuple(c for c in choices if c.target != known.key),
        unmapped=_unmapped(left, set(), hint),
        findings=(
            *sample.findings,
            finding,
            *value_findings(cols, hint),
            *_key_findings(key, candidates),
        ),
        mapping=dict(known.mapping),
        questions=tuple(questions),
        notes=(*sample.notes, *notes, f"{known.title}: see {known.doc}"),
        known=known.name,
        key_spec=dict(key_choice.spec) if key_choice else None,
        columns=tuple(cols),
        hint=hint,
        count=len(records),
    )


def _styled(
    target: str, spec: dict[str, Any], column: Column | None, hint: str | None, notes: list[str]
) -> dict[str, Any]:
    """A known mapping's number field, in the style the values are written in."""
    if column is None or spec.get("type") not in ("decimal", "integer"):
        return spec
    found = f.numeric("stock" if spec["type"] == "integer" else target, column, hint)
    if found is None:
        return spec
    styled, _, said = found
    notes.extend(said)
    out = dict(spec)
    out["type"] = styled["type"] if spec["type"] == "integer" else "decimal"
    for option in ("decimal", "thousands"):
        if option in styled:
            out[option] = styled[option]
    return out


def _known_key(
    known: Known,
    choice: FieldChoice | None,
    *,
    by_name: dict[str, Column],
    candidates: list[KeyCandidate],
    count: int,
    notes: list[str],
) -> KeyCandidate | None:
    if choice is None:
        return None
    name = choice.source_name or str(choice.spec.get("path", ""))
    column = by_name.get(name) or Column(name, choice.spec.get("path"), ())
    why = f"the key of {known.title} (its worked example)"
    problem = k.problem_of(column, count) if column.values else None
    if problem:
        skipped = known.source.get("skip_if_empty", ())
        if name in skipped and problem.startswith("empty"):
            why += f"; {problem}: those rows are skipped (skip_if_empty)"
        else:
            why += f"; {problem} in the sample"
            notes.append(f"the key {name!r} is {problem}: those rows are refused, with the line")
    else:
        why += f"; unique and non-empty in all {count} records"
    score = next((c.score for c in candidates if c.column.name == name), 10.0)
    return KeyCandidate(column, score, why)


def _store_views(
    known: Known, records: Sequence[dict[str, Any]], source: dict[str, Any], notes: list[str]
) -> list[int]:
    """Magento: rows of other store views repeat a sku; only the default view's are read.
    The indexes of the records read."""
    every = list(range(len(records)))
    if known.name != "magento" or "store_view_code" not in top_names(records):
        return every
    views = sorted({str(r.get("store_view_code") or "") for r in records} - {""})
    if not views:
        return every
    source["where"] = "store_view_code == ''"
    notes.append(
        f"rows of the store views {', '.join(map(repr, views[:4]))} repeat a sku with "
        "translated fields: only the default view's rows are read (where); export the "
        "default store view only, or keep the filter"
    )
    return [i for i in every if not records[i].get("store_view_code")]


# --- the user's answers -----------------------------------------------------------


def with_key(proposal: Proposal, name: str) -> Proposal:
    """The proposal with the candidate column ``name`` as its key."""
    chosen = next((c for c in proposal.candidates if c.column.name == name), None)
    if chosen is None:
        raise ValueError(f"{name!r} is not unique and non-empty in the sample")
    old = proposal.key.column.name if proposal.key else None
    unmapped = [u for u in proposal.unmapped if u[0] != name]
    if old is not None and old != name and not any(c.source_name == old for c in proposal.fields):
        column = next((c for c in proposal.columns if c.name == old), None)
        if column is not None:
            unmapped.insert(0, (old, f.describe(column, hint=proposal.hint)))
    key = replace(chosen, why=chosen.why + " (chosen by you)")
    questions = tuple(q for q in proposal.questions if q.topic != "key")
    return replace(proposal, key=key, key_spec=None, unmapped=tuple(unmapped), questions=questions)


def without_field(proposal: Proposal, target: str) -> Proposal:
    """The proposal without the field ``target``; its column is listed as left out."""
    dropped = proposal.field(target)
    if dropped is None:
        raise ValueError(f"no field {target!r} in the proposal")
    fields = tuple(c for c in proposal.fields if c.target != target)
    unmapped = proposal.unmapped
    if dropped.source_name:
        unmapped = ((dropped.source_name, f"was {target}; left out by you"), *unmapped)
    return replace(proposal, fields=fields, unmapped=unmapped)


def answer(proposal: Proposal, question: Question, option: int | None) -> Proposal:
    """The proposal with ``question`` settled by its option number ``option`` (None:
    leave it as proposed)."""
    rest = tuple(q for q in proposal.questions if q is not question)
    settled = replace(proposal, questions=rest)
    if option is None or not question.options:
        return settled if option is not None else proposal
    label = question.options[option][0]
    if question.topic == "key":
        return with_key(settled, label)
    if question.topic.startswith("field:"):
        target = question.topic.removeprefix("field:")
        if label == "none":
            return without_field(settled, target) if settled.field(target) else settled
        return _read_as(settled, target, label)
    if question.topic.startswith("column:"):
        column = question.topic.removeprefix("column:")
        return settled if label == "none" else _read_as(settled, label, column)
    return settled


def _read_as(proposal: Proposal, target: str, name: str) -> Proposal:
    """``target`` read from the column ``name`` (typed as the column's values allow)."""
    column = next(c for c in proposal.columns if c.name == name)
    spec = dict(column.spec())
    why = "chosen by you"
    if target in f.NUMERIC:
        found = f.numeric(target, column, proposal.hint)
        if found is not None:
            spec.update(found[0])
            why += f"; {found[1]}"
    choice = FieldChoice(target, spec, why, "sure", name)
    fields = [c for c in proposal.fields if c.target != target]
    previous = proposal.field(target)
    unmapped = [u for u in proposal.unmapped if u[0] != name]
    if previous is not None and previous.source_name and previous.source_name != name:
        unmapped.insert(0, (previous.source_name, f"was {target}; replaced by {name!r}"))
    order = [*FIELDS]
    fields.append(choice)
    fields.sort(key=lambda c: order.index(c.target) if c.target in order else len(order))
    return replace(proposal, fields=tuple(fields), unmapped=tuple(unmapped))
