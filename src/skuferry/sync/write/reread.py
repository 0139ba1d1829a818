"""A run that hears its source: a new export read again while the run still writes.

A long run (an hour of description updates at the budget's pace) must not make a
price changed in the next export wait for its end. When a watched file (the
source's or a join's) settles in a new version during a run, the daemon tells
the run (``UrgentInbox.source_changed``); before its next write, the run reads
the whole source again, maps it, and hands the keys whose urgent fields
(``[mapping] urgent``) now differ from what this run would leave on the CMS to
its urgent lane. The lane reads those keys from the new source
and sends them first, through the same writer, budget and journal. Any other
change waits for the next run, which the watch starts as before.

What this run would leave on the CMS: for a product the run still has to write,
the urgent fields of its planned write; for any other, what was last sent
(``Mirror.payload``). A product the CMS does not hold yet and the run does not
create is left to the next run.

The second look changes nothing else: the run's plan, its order and its journal
stay as they were; only keys are added to the lane. The rules for absence hold:
a torn export (the reader raises ``SourceError``), an empty one, or any read that
fails is ignored with a ``sync.reread.ignored`` event, and a product missing from
the new export is never taken as gone by it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from typing import Any

from skuferry import errors, logs
from skuferry.models import Action, BadRecord, Product
from skuferry.sources.base import Source
from skuferry.state.mirror import Mirror
from skuferry.sync.map.mapper import Mapper

log = logs.get(__name__)

Opener = Callable[[ExitStack], tuple[Source, Mapper]]  # the source opened afresh, and its mapping
_MISSING = object()


def urgent_values(payload: dict[str, Any] | None, urgent: Sequence[str]) -> tuple[Any, ...]:
    """The urgent fields of ``payload`` (a field it lacks counts as its own value)."""
    found = payload or {}
    return tuple(found.get(field, _MISSING) for field in urgent)


class Reread:
    """``__call__``: the keys whose urgent fields changed in the source as it is now.

    ``open_fresh`` opens the source again (new join indexes included); ``planned``
    yields the writes this run still holds; ``on_source`` receives the source the
    lane should read its keys from from now on (the one read here).
    """

    def __init__(
        self,
        mirror: Mirror,
        urgent: Sequence[str],
        *,
        open_fresh: Opener,
        planned: Callable[[], Iterable[Action]],
        on_source: Callable[[Source], None],
    ) -> None:
        self._mirror = mirror
        self._urgent = tuple(urgent)
        self._open = open_fresh
        self._planned = planned
        self._on_source = on_source
        self._will_send: dict[str, tuple[Any, ...]] | None = None  # read on first use
        self._stacks: list[ExitStack] = []  # the sources opened here, closed with the run

    def __call__(self) -> list[str]:
        if not self._urgent:
            return []
        stack = ExitStack()
        try:
            source, mapper = self._open(stack)
            read, changed = self._changed(source, mapper)
        except errors.SkuferryError as exc:  # a torn, unreadable or failing export
            stack.close()
            log.warning("sync.reread.ignored", reason=str(exc), error_type=type(exc).__name__)
            return []
        except Exception:
            stack.close()
            raise
        if read == 0:
            stack.close()
            log.warning("sync.reread.ignored", reason="the source holds no product")
            return []
        self._stacks.append(stack)
        self._on_source(source)
        log.info("sync.reread.changed", records=read, urgent=len(changed))
        return list(changed)

    def _changed(self, source: Source, mapper: Mapper) -> tuple[int, dict[str, tuple[Any, ...]]]:
        will_send = self._baseline()
        changed: dict[str, tuple[Any, ...]] = {}
        read = 0
        for record in source.records():
            if isinstance(record, BadRecord):
                continue  # held by the lane's own read, or by the next run
            read += 1
            product = mapper.map(record)
            if not isinstance(product, Product):
                continue
            now = urgent_values(product.payload, self._urgent)
            before = will_send.get(product.key)
            if before is None:
                sent = self._mirror.payload(product.key)
                if sent is None:
                    continue  # not on the CMS, not created by this run: the next run's
                before = urgent_values(sent, self._urgent)
            if now != before:
                changed[product.key] = now
        will_send.update(changed)  # the lane sends these: the next look compares with them
        return read, changed

    def _baseline(self) -> dict[str, tuple[Any, ...]]:
        if self._will_send is None:
            self._will_send = {
                action.key: urgent_values(action.product.payload, self._urgent)
                for action in self._planned()
                if action.key is not None and action.product is not None
            }
        return self._will_send

    def close(self) -> None:
        for stack in reversed(self._stacks):
            stack.close()
        self._stacks.clear()
