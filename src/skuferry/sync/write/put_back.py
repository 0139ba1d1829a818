"""An undo's writes: each product's fields put back, carried out like any write.

``PutBack`` is one product of an undo (``plan.undoing.Step``): journalled before its
request (``record_update_sent``, which also records its history row, so the undo is
itself undoable), sent as exactly the fields to put back (PATCH, or PUT over the product
as read), its outcome committed with the row as the CMS now holds it
(``record_put_back``): the state and digests the product had before the undone run when
every field went back. A product the undone run created goes out as the ordinary
``Archive`` write (the ``[gone]`` patch). An answer lost is read back before the undo
ends (``settle``), as any update's: a field the CMS no longer holds as the undone run
sent it is then left, never overwritten.

``UndoWriter`` is the writer of an undo run: the bounded pool, budgets and settling of
any run, with its steps by key.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from skuferry import errors, logs
from skuferry.canonical import same_value
from skuferry.models import Action, Kind, State
from skuferry.state import history
from skuferry.sync.plan.undoing import LEFT, FieldBack, Step
from skuferry.sync.write.actions import Write, WriteContext
from skuferry.sync.write.writer import Writer

log = logs.get("skuferry.sync.undo")


class UndoWriter(Writer):
    """The writer of an undo: its steps by key (``steps``), written as ``PutBack``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.steps: dict[str, Step] = {}
        self.late: dict[str, list[FieldBack]] = {}  # fields a read-back found changed since

    def write_of(self, action: Action) -> Write[Any]:
        step = self.steps.get(action.key or "")
        if action.kind is Kind.UPDATE and step is not None:
            return PutBack(action, self.context, step, self)
        return super().write_of(action)

    def action(self, step: Step) -> Action:
        """The write action of ``step``, which the writer then carries out by key."""
        self.steps[step.key] = step
        kind = Kind.ARCHIVE if step.action == "archive" else Kind.UPDATE
        return Action(kind, step.key, remote_id=step.remote_id)


class PutBack(Write[dict[str, Any]]):
    """One product's fields put back (its answer: the fields now last sent)."""

    def __init__(
        self, action: Action, context: WriteContext, step: Step, writer: UndoWriter
    ) -> None:
        super().__init__(action, context)
        self.key = step.key
        self.step = step
        self._writer = writer

    def send(self) -> Callable[[], dict[str, Any]] | None:
        context, step = self.context, self.step
        sent = context.mirror.payload(self.key)
        now_sent = _sent_after(sent, step)
        if not step.body:  # every field already back (an undo cut short, run again)
            self._commit(now_sent)
            return None
        if context.updates_off_reason is not None:
            self.updates_refused(context.updates_off_reason)
            return None
        # Journalled (with its history row) before the request: a lost answer is read back.
        context.mirror.record_update_sent(
            self.key,
            step.body,
            kind=step.history_kind,
            sending=step.body,
            before={f.name: f.now for f in step.fields if f.name in step.body},
        )
        return functools.partial(self._request, now_sent)

    def _request(self, now_sent: dict[str, Any]) -> dict[str, Any]:
        self.context.updater.put_back(self.remote_id, self.step.body)
        return now_sent

    def applied(self, answer: dict[str, Any]) -> None:
        self.context.updates_confirmed = True
        self._commit(answer)

    def _commit(self, sent: dict[str, Any]) -> None:
        step, target = self.step, self.step.target
        if target is None:  # pragma: no cover - a step that writes has a target
            raise RuntimeError(f"an undo step without a target: {step.key}")
        late = self._writer.late.get(self.key)
        complete = not step.left and not late
        self.context.mirror.record_put_back(
            self.key,
            self.remote_id,
            state=State(target.state),
            digest=target.digest if complete else None,
            record_digest=target.record_digest if complete else None,
            sent=sent,
        )
        summary = self.context.summary
        if step.history_kind == "archive":
            summary.archived += 1
        elif step.history_kind == "restore":
            summary.restored += 1
        else:
            summary.updated += 1
        log.debug("sync.undo.put_back", key=self.key, fields=sorted(step.body))

    # -- failures ---------------------------------------------------------------------
    def in_doubt(self, exc: errors.SkuferryError) -> None:
        self.context.unsettled.append(self.action)  # read back before the undo ends
        log.warning("sync.undo.unknown", key=self.key, error=str(exc))

    def refused(self, exc: errors.Rejected) -> None:
        reason = exc.message or str(exc)
        self.context.mirror.record_failed(
            self.key, reason, status=exc.status, outcome=history.REFUSED
        )
        self.context.summary.refused(self.key, None, f"not put back: {exc}")

    def updates_refused(self, reason: str) -> None:
        self.context.mirror.record_failed(self.key, reason)
        self.context.summary.fail(self.key, f"not put back: {reason}")

    def remote_missing(self) -> None:
        self.context.summary.fail(self.key, "not put back: no longer on the CMS")

    def not_applied(self, exc: errors.SkuferryError) -> None:
        status = exc.status if isinstance(exc, errors.HttpError | errors.BadResponse) else None
        self.context.mirror.record_failed(self.key, str(exc), status=status)

    def expected(self, sent: Mapping[str, Any] | None) -> dict[str, Any]:
        return dict(self.step.body)

    def found_applied(self, sent: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> None:
        self._commit(_sent_after(sent, self.step))

    def found_unapplied(
        self, remote: Mapping[str, Any], sent: Mapping[str, Any] | None, wanted: Mapping[str, Any]
    ) -> None:
        # Sent again, only the fields the CMS still holds as the undone run sent them.
        step = self.step
        body, late = {}, []
        for back in step.fields:
            if back.name not in step.body:
                continue
            now = remote.get(back.name)
            if same_value(now, back.sent):
                body[back.name] = back.back
            elif not same_value(now, back.back):
                why = f"changed on the CMS while the undo ran (it holds {now!r})"
                late.append(FieldBack(back.name, back.sent, back.back, True, now, LEFT, why))
        self._writer.late.setdefault(self.key, []).extend(late)
        self._writer.steps[self.key] = Step(
            step.key,
            step.remote_id,
            step.kind,
            step.action,
            step.reason,
            step.fields,
            body,
            step.target,
            step.history_kind,
        )
        self.context.mirror.remember_remote(self.key, {**(sent or {}), **_known(remote, step)})

    def given_up(self, reason: str) -> None:
        self.context.mirror.record_failed(self.key, reason, outcome=history.UNKNOWN)


def _sent_after(sent: Mapping[str, Any] | None, step: Step) -> dict[str, Any]:
    """What was last sent once the step landed: the fields skuferry had sent before the
    undone run, back to those values (the ``[gone]`` tables' fields stay out)."""
    return {**(sent or {}), **step.sent_back}


def _known(remote: Mapping[str, Any], step: Step) -> dict[str, Any]:
    return {f.name: remote[f.name] for f in step.fields if f.was_sent and f.name in remote}
