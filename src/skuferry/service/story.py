"""One product's story (``skuferry explain KEY``, the page's product page): where it is in
the source now, what the CMS has as far as skuferry knows, its state and why, the last
runs that wrote it, field by field, and what the next run would do.

Nothing here decides anything: each answer is asked of the home that decides it.

- the source's record and the payload the mapping makes of it now: the run's own read
  and map stages, over a named pull of the key (read-only, as ``sync --only KEY
  --dry-run`` reads it);
- what the next run does: the planner's rule (``plan``, ``rule.decide``; for a key the
  source no longer holds, ``rule.leaving``), what an update would carry (field ownership,
  ``fields.changes``), whether the source is a feed an undo took back (``read.undone``);
- held: the run's completeness ledger (a torn export, a join not read whole) and the
  mapping's refusal of the row; refused: the dead letter the CMS's answer left and the
  write's history row; a create in doubt, an archive in doubt: ``lifecycle``; work the
  next run does even on the same source: the skip decision's ``pending_states``.
"""

from __future__ import annotations

import threading
import time
import unicodedata
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import IO, Any

from skuferry import canonical, errors
from skuferry.completeness import Reader
from skuferry.config.schema import Settings
from skuferry.lifecycle import archive_in_doubt
from skuferry.models import Action, BadRecord, Kind, Product, RunOptions, RunSummary, State
from skuferry.sources.base import Source
from skuferry.state.deadletters import DeadLetter
from skuferry.state.history import Entry
from skuferry.state.mirror import Mirror
from skuferry.state.shapes import Refusal
from skuferry.sync import skip
from skuferry.sync.context import Adapters, Policies, RunContext
from skuferry.sync.map import stage as map_stage
from skuferry.sync.plan.planner import plan
from skuferry.sync.plan.rule import leaving
from skuferry.sync.read import stage as read_stage
from skuferry.sync.read import undone
from skuferry.sync.read.pulled import reported
from skuferry.sync.write import fields

HISTORY = 10  # writes told

# The verdicts: where a product stands, in a merchandiser's words.
IN_STEP = "in_step"  # the CMS holds what the source says
WAITING = "waiting"  # the next run writes it (changed, new, back, failed before)
HELD = "held"  # kept as it is: its row, a join or the export could not be read whole
REFUSED = "refused"  # the CMS refused these data: not sent again until they change
IN_DOUBT = "in_doubt"  # a create whose answer was lost: looked up before any re-send
ARCHIVED = "archived"  # left the source and got the [gone] patch
GONE = "gone"  # left the source; it stays on the CMS
LEAVING = "leaving"  # not in the source any more: the next full run decides
DUPLICATE = "duplicate"  # the CMS holds several products with this key
REMOTE_ONLY = "remote_only"  # on the CMS, never in this source
UNKNOWN = "unknown"  # neither in the source nor in the state


@dataclass
class Story:
    asked: str  # as typed
    key: str  # as skuferry stores it (Unicode NFC, stripped)
    verdict: str = UNKNOWN
    why: str = ""
    again: str = ""  # what makes it go again (held, refused)
    since: dict[str, Any] | None = None  # {"run": id or None, "at": unix time}
    source: dict[str, Any] | None = None  # {"where", "line", "payload", "problem"}
    cms: dict[str, Any] | None = None  # {"remote_id", "state", "sent", "synced_at", ...}
    next: dict[str, Any] = field(default_factory=dict)  # {"action", "words", "changes"}
    not_sent: list[dict[str, Any]] = field(default_factory=list)  # {"field", "why"}
    history: list[Entry] = field(default_factory=list)
    similar: list[str] = field(default_factory=list)  # known keys it differs from by case...
    notes: list[str] = field(default_factory=list)

    @property
    def known(self) -> bool:
        return self.verdict != UNKNOWN

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "asked": self.asked,
            "known": self.known,
            "verdict": self.verdict,
            "why": self.why,
            "again": self.again,
            "since": self.since,
            "source": self.source,
            "cms": self.cms,
            "next": self.next,
            "not_sent": self.not_sent,
            "history": [written(e) for e in self.history],
            "similar": self.similar,
            "notes": self.notes,
        }


def written(entry: Entry) -> dict[str, Any]:
    """One write of the history, field by field."""
    return {
        "run_id": entry.run_id,
        "at": entry.at,
        "kind": entry.kind,
        "outcome": entry.outcome,
        "status": entry.status,
        "error": entry.error,
        "remote_id": entry.remote_id,
        "changes": [
            {
                "field": name,
                "before": (entry.before or {}).get(name),
                "before_known": entry.before is not None and name in entry.before,
                "after": value,
            }
            for name, value in entry.after.items()
        ],
    }


def folded(key: str) -> str:
    """A key as a person may have meant it: case, compatibility forms and spaces aside."""
    return unicodedata.normalize("NFKC", key).casefold().strip()


@dataclass
class _Read:
    """The key as the source holds it now, and what the planner makes of it."""

    where: str = ""
    records: list[Product | BadRecord] = field(default_factory=list)
    action: Action | None = None
    error: str | None = None  # the source could not be read whole
    refused_feed: undone.Undone | None = None
    join_held: bool = False
    shape: Refusal | None = None  # a pull refused for its shape holds the source back


def tell(
    settings: Settings, asked: str, *, source: Source | None = None, limit: int = HISTORY
) -> Story:
    """The story of the product ``asked`` names (``source``: one to read instead of the
    settings', for tests). Reads only: nothing is written, no lock is taken."""
    key = canonical.key(asked)
    story = Story(asked, key)
    if key != asked:
        story.notes.append(f"read as {key!r} (keys compare stripped, in Unicode NFC)")
    mirror = Mirror(settings.state.path, readonly=True)
    try:
        facts = mirror.product(key)
        row = mirror.rows([key]).get(key)
        letters = mirror.dead_letters([key])
        story.history = mirror.history_of(key, limit=limit)
        read = _read(settings, key, mirror, source)
        read.shape = mirror.shape_status().refused  # the shape's own word (``state.shapes``)
        if facts is None and not read.records:
            story.similar = [k for k in mirror.keys_like(folded, folded(key)) if k != key]
    finally:
        mirror.close()
    _cms(story, facts)
    _source(story, read)
    policies = Policies.of(settings)
    _verdict(
        story, settings, facts, row=row, letters=letters, read=read, archiving=policies.archiving
    )
    _next(story, facts, row, read, ownership=policies.ownership, archiving=policies.archiving)
    return story


def _read(settings: Settings, key: str, mirror: Mirror, source: Source | None) -> _Read:
    """The named pull of ``key``, mapped and planned as the next run would (read-only)."""
    found = _Read()
    with ExitStack() as stack:
        run = RunContext(
            settings,
            RunOptions(dry_run=True, only=(key,)),
            mirror,
            RunSummary(dry_run=True),
            stack,
            threading.Event(),
            Adapters(source=source),
        )
        try:
            base, src, mapper = map_stage.open_mapped(run, stack, readonly=True, ledger=run.ledger)
            found.where = src.describe()
            found.refused_feed = undone.found(mirror, undone.token_now(settings, base, src))
            opened = read_stage.begin(run, base, src, mapper)
            if opened.named is None:  # pragma: no cover - a named run has a named pull
                raise RuntimeError("explain reads a named pull")
            records = list(
                reported(
                    opened.named.records(src),
                    run.ledger,
                    found.where,
                    pull=None,
                    named=opened.named,
                )
            )
            if found.refused_feed is None:  # no token to know it by: the content read
                feed = undone.feed_now(settings, base, src)
                found.refused_feed = undone.found(mirror, None, feed=feed)
        except errors.SourceError as exc:
            found.error = _ledger_reason(run, str(exc))
            return found
        found.records = [r if isinstance(r, BadRecord) else mapper.map(r) for r in records]
        actions = plan(
            records,
            mirror.known(),
            walked=mirror.walked(),
            mapper=mapper,
            full=False,
            ledger=run.ledger,
            archiving=run.archiving,
        )
        for action in actions:
            if action.key == key:
                found.action = action  # the last one for a key is the plan's
        found.join_held = any(
            v.reader is Reader.JOIN and not v.complete for v in run.ledger.verdicts()
        )
    return found


def _ledger_reason(run: RunContext, said: str) -> str:
    """Why the pull is not whole, as the run's ledger has it (the reader's words)."""
    reasons = [
        v.reason
        for v in run.ledger.verdicts()
        if not v.complete
        and v.reader in (Reader.SOURCE, Reader.ITEMS)
        and "named pull" not in v.reason
    ]
    return reasons[-1] if reasons else said


def _cms(story: Story, facts: dict[str, Any] | None) -> None:
    if facts is None:
        return
    story.cms = {
        "remote_id": facts["remote_id"],
        "state": facts["state"],
        "sent": facts["sent"],
        "synced_at": facts["synced_at"],
        "updated_at": facts["updated_at"],
        "first_seen": facts["first_seen"],
        "last_error": facts["last_error"],
    }


def _source(story: Story, read: _Read) -> None:
    if read.error is not None or not read.records:
        return
    last = read.records[-1]
    if isinstance(last, BadRecord):
        story.source = {
            "where": read.where,
            "line": last.line,
            "payload": None,
            "problem": last.reason,
        }
    else:
        story.source = {
            "where": read.where,
            "line": last.line,
            "payload": last.payload,
            "problem": None,
        }
    if len(read.records) > 1:
        lines = ", ".join(str(r.line) for r in read.records)
        story.notes.append(f"the source holds this key {len(read.records)} times (lines {lines})")


def _last(story: Story, *outcomes: str, kind: str | None = None) -> Entry | None:
    return next(
        (e for e in story.history if e.outcome in outcomes and (kind is None or e.kind == kind)),
        None,
    )


def _since(entry: Entry | None, fallback: float | None = None) -> dict[str, Any] | None:
    if entry is not None:
        return {"run": entry.run_id, "at": entry.at}
    return None if fallback is None else {"run": None, "at": fallback}


def _verdict(
    story: Story,
    settings: Settings,
    facts: dict[str, Any] | None,
    *,
    row: Any,
    letters: list[DeadLetter],
    read: _Read,
    archiving: str | None,
) -> None:
    """Where the product stands, and why: each answer asked of its home."""
    state = State(facts["state"]) if facts is not None else None
    action = read.action
    kind = action.kind if action is not None else None
    if read.shape is not None and (facts is not None or read.records):
        _held_by_shape(story, read.shape, facts, read)
    elif read.error is not None or kind is Kind.REJECT:
        _held(story, read)
    elif kind is Kind.STILL_REJECTED or state is State.REJECTED:
        _refused(story, next(iter(letters), None), facts)
    elif facts is not None and facts["intent"] is not None:
        story.verdict = IN_DOUBT
        started = _last(story, "sent", "unknown", kind="create")
        run = f" in run {started.run_id}" if started and started.run_id else ""
        story.why = f"a create went out{run} and its answer was lost: it may be on the CMS or not"
        story.since = _since(started, facts["intent"])
    elif facts is not None and state is State.ARCHIVED:
        _archived(story, facts, row, archiving)
    elif facts is not None and state is State.GONE:
        story.verdict = GONE
        story.why = (
            "gone: it left the source; it stays on the CMS as it was (the API has no DELETE "
            'for products; [gone] action = "patch" would archive it)'
        )
        story.since = _since(None, facts["updated_at"])
    elif facts is not None and state is State.DUPLICATE:
        story.verdict, story.why = DUPLICATE, f"not created: {facts['last_error']}"
        story.again = "merge the products on the CMS: the next run looks the key up again"
    elif state is State.REMOTE_ONLY and action is None:
        story.verdict = REMOTE_ONLY
        story.why = "on the CMS (found by a walk of its list), never in this source"
    elif kind in (Kind.CREATE, Kind.UPDATE, Kind.RESTORE):
        _waiting(story, settings, state, facts, kind)
    elif kind is Kind.UNCHANGED:
        story.verdict = IN_STEP
        story.why = "in step: the CMS holds what the source says, as far as skuferry knows"
        story.since = _since(_last(story, "ok"), facts["synced_at"] if facts else None)
    elif facts is not None and action is None:
        story.verdict = LEAVING
        story.why = "not in the source any more (or filtered out); the next full run decides"
    else:
        story.verdict = UNKNOWN
        story.why = "neither the source nor skuferry's state holds this key"
        if story.similar:
            story.why += "; did you mean " + ", ".join(repr(k) for k in story.similar) + "?"


def _held(story: Story, read: _Read) -> None:
    """Held: the export not whole (the ledger's verdict), or the row or its join refused."""
    story.verdict = HELD
    if read.error is not None:
        story.why = f"held: the export is not whole ({read.error})"
        story.again = "a whole export: the next run reads it again, and nothing is written before"
        return
    reason = read.action.reason if read.action is not None else ""
    by = "a join" if read.join_held and "join" in (reason or "") else "its row"
    story.why = f"held by {by}: {reason}"
    story.again = (
        "the row read whole again (fix the export or the join's source); until then the "
        "product keeps its last state on the CMS"
    )


def _held_by_shape(
    story: Story, refusal: Refusal, facts: dict[str, Any] | None, read: _Read
) -> None:
    """Held: a pull was refused for its shape (the state's ``shape_status``); the changes
    that touch this product's fields first."""
    story.verdict = HELD
    mine = set((facts or {}).get("sent") or {})
    for record in read.records:
        if isinstance(record, Product):
            mine.update(record.payload)
    changes = sorted(refusal.breaking, key=lambda c: c.target not in mine)
    said = "; ".join(c.text for c in changes[:3]) or "the export changed shape"
    run = f" (run {refusal.run_id})" if refusal.run_id is not None else ""
    story.why = f"held by a shape change{run}: {said}"
    story.since = {"run": refusal.run_id, "at": refusal.at}
    story.again = (
        "the export fixed to the shape it had, or the new shape accepted on purpose "
        "(`skuferry accept-shape`); until then nothing of the source is written"
    )


def _archived(story: Story, facts: dict[str, Any], row: Any, archiving: str | None) -> None:
    story.verdict = ARCHIVED
    if row is not None and archive_in_doubt(row, archiving):
        story.why = (
            "being archived: the [gone] patch went out and its answer never came "
            "(it may be archived on the CMS or not)"
        )
    elif facts["rejected_digest"] is not None:
        story.why = f"archived; its restore was refused: {facts['last_error']}"
    else:
        story.why = "archived: it left the source and got the [gone] patch"
    story.since = _since(_last(story, "ok", kind="archive"), facts["updated_at"])


def _refused(story: Story, letter: DeadLetter | None, facts: dict[str, Any] | None) -> None:
    story.verdict = REFUSED
    refusal = _last(story, "refused")
    status = f"HTTP {letter.status}: " if letter is not None and letter.status else ""
    reason = letter.reason if letter is not None else (facts or {}).get("last_error") or ""
    run = f" in run {refusal.run_id}" if refusal is not None and refusal.run_id else ""
    story.why = f"refused by the CMS{run}: {status}{reason}"
    story.since = _since(refusal, letter.first_seen if letter is not None else None)
    story.again = (
        "not sent again until its data change in the source; `skuferry retry KEY` (or the "
        "page's retry) sends the same data again"
    )


def _waiting(
    story: Story,
    settings: Settings,
    state: State | None,
    facts: dict[str, Any] | None,
    kind: Kind,
) -> None:
    story.verdict = WAITING
    pending = state is not None and state in skip.pending_states(settings)
    last_error = (facts or {}).get("last_error")
    if state is None:
        story.why = "new in the source: not on the CMS yet"
    elif kind is Kind.RESTORE:
        story.why = "back in the source after its archive: the next run restores it"
    elif state is State.FAILED:
        story.why = f"its last write failed ({last_error}); tried again by the next run"
    elif state is State.DRIFT:
        story.why = f"changed in the source, not sent: {last_error}"
    elif state is State.PENDING:
        story.why = (
            f"waiting for its create ({last_error})" if last_error else "waiting for its create"
        )
    else:
        wrote = _last(story, "ok")
        when = f" (last written in run {wrote.run_id})" if wrote and wrote.run_id else ""
        story.why = f"the source changed since it was last sent{when}"
    if pending:
        story.why += "; pending work: the next run reads the source even if it did not change"


_WORDS = {
    Kind.CREATE: "create it",
    Kind.UPDATE: "update it",
    Kind.RESTORE: "restore it: its data and the [gone] restore table",
    Kind.UNCHANGED: "nothing: it is in step",
    Kind.STILL_REJECTED: "nothing: the same data were refused; sent when they change",
    Kind.REJECT: "nothing: it is held",
    Kind.ARCHIVE: "archive it with the [gone] patch",
    Kind.GONE: "mark it gone (it stays on the CMS)",
}


def _next(
    story: Story,
    facts: dict[str, Any] | None,
    row: Any,
    read: _Read,
    *,
    ownership: fields.Ownership,
    archiving: str | None,
) -> None:
    """What the next run would do: the plan's action, an update's fields (field
    ownership), a key the source lost (``leaving``); an undone feed refuses the run."""
    sent = (facts or {}).get("sent")
    action = read.action
    mapped = read.records[-1] if read.records else None
    product = mapped if isinstance(mapped, Product) else None  # the payload the mapping makes
    changes: list[dict[str, Any]] = []
    if read.shape is not None and (row is not None or read.records):
        kind_word = "refused"
        words = "nothing: runs are refused for the source's shape until it is fixed or accepted"
    elif read.error is not None:
        kind_word, words = "none", "nothing until the export is whole"
    elif action is None:
        leaves = leaving(row, archiving=archiving) if row is not None else None
        kind_word = leaves.value if leaves is not None else "none"
        words = _WORDS[leaves] if leaves is not None else "nothing"
        if leaves is not None:
            words += " (a full run; a named one decides nothing gone)"
    else:
        kind_word, words = action.kind.value, _WORDS.get(action.kind, action.kind.value)
        if action.kind is Kind.CREATE and action.lookup_first:
            words = "look the key up on the CMS first (its absence is not proven), then create it"
        if action.kind in (Kind.UPDATE, Kind.RESTORE) and product is not None:
            body = fields.changes(product.payload, sent, ownership)
            changes = [{"field": k, "from": (sent or {}).get(k), "to": v} for k, v in body.items()]
            if not body and action.kind is Kind.UPDATE:
                words = "nothing goes out: only fields the CMS owns changed"
    if product is not None and sent is not None:
        payload = product.payload
        for name in sorted(ownership.create_only & set(payload)):
            if name in sent and not canonical.same_value(payload[name], sent[name]):
                story.not_sent.append(
                    {"field": name, "why": "create_only: sent when it was created, the CMS's since"}
                )
        if not ownership.send_nulls:
            for name in fields.dropped(payload, sent, ownership):
                story.not_sent.append(
                    {
                        "field": name,
                        "why": "the source no longer gives it; the CMS keeps its value "
                        "([mapping] send_nulls is off)",
                    }
                )
    refused = read.refused_feed
    if refused is not None and (row is not None or action is not None):
        words = f"nothing: the run is refused ({refused.words()}) until the export changes"
        kind_word = "refused"
    story.next = {"action": kind_word, "words": words, "changes": changes}


def stamp(unix: float | None) -> str:
    """A time as the story tells it (local time, to the minute)."""
    return "—" if unix is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(unix))


def shown(value: Any) -> str:
    """A field's value as the story shows it: strings quoted, numbers as sent, null as
    "nothing"."""
    if value is None:
        return "nothing"
    return repr(value) if isinstance(value, str) else canonical.dumps(value)


def _fields(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {shown(v)}" for k, v in sorted(values.items()))


def history_line(entry: Entry) -> str:
    """``price 12.50 → 1250.00, run 41, 2026-11-27 03:00, ok``."""
    if entry.kind == "create":
        what = f"created ({_fields(entry.after)})"
    else:
        before = entry.before or {}
        what = "; ".join(
            f"{k} {shown(before[k]) if k in before else '?'} → {shown(v)}"
            for k, v in entry.after.items()
        )
        what = f"{entry.kind}: {what}" if entry.kind != "update" else what
    outcome = entry.outcome
    if entry.status:
        outcome += f" {entry.status}"
    if entry.error and entry.outcome != "ok":
        outcome += f": {entry.error}"
    run = f"run {entry.run_id}" if entry.run_id is not None else "no run"
    return f"{what}, {run}, {stamp(entry.at)}, {outcome}"


def print_story(story: Story, out: IO[str]) -> None:
    out.write(f"{story.key} — {story.verdict.replace('_', ' ')}\n")
    since = ""
    if story.since is not None:
        run = f"run {story.since['run']}, " if story.since.get("run") is not None else ""
        since = f" (since {run}{stamp(story.since['at'])})"
    out.write(f"  {story.why}{since}\n")
    if story.again:
        out.write(f"  what makes it go again: {story.again}\n")
    for note in story.notes:
        out.write(f"  note: {note}\n")
    if story.source is not None:
        src = story.source
        out.write(f"source:   {src['where']} line {src['line']}\n")
        if src["payload"] is not None:
            out.write(f"  payload: {canonical.dumps(src['payload'])}\n")
        else:
            out.write(f"  refused: {src['problem']}\n")
    elif story.verdict not in (UNKNOWN,):
        out.write("source:   not in the source\n")
    if story.cms is not None:
        cms = story.cms
        rid = cms["remote_id"] or "none yet"
        sent_at = stamp(cms["synced_at"])
        out.write(f"CMS:      remote id {rid}, state {cms['state']}, last sent {sent_at}\n")
        if cms["sent"] is not None:
            out.write(f"  last sent: {canonical.dumps(cms['sent'])}\n")
    for item in story.not_sent:
        out.write(f"  not sent: {item['field']}: {item['why']}\n")
    if story.history:
        out.write("history (newest first):\n")
        for entry in story.history:
            out.write(f"  {history_line(entry)}\n")
    nxt = story.next
    out.write(f"next run: {nxt.get('words', 'nothing')}\n")
    for change in nxt.get("changes", []):
        out.write(f"  {change['field']} {shown(change['from'])} → {shown(change['to'])}\n")
