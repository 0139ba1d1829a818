"""What one run knows before it reads a record: built once from the settings.

The engine builds a ``RunContext`` when a run starts and hands it to each stage. A stage
says in a small protocol of its own which of these it reads (the read stage the source's
edges and the skip decision's inputs, the plan the gone policy and the guards, the
writes the ownership, the clock and the client), so what a decision depends on is named
once here and nowhere recomputed: the gone policy and whether it archives, the states
that count as pending work, field ownership, the run's ledger and its budgets.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from skuferry.completeness import Ledger
from skuferry.config.keys import fingerprint
from skuferry.config.schema import Settings
from skuferry.models import Action, Progress, RunOptions, RunSummary, State
from skuferry.shape import Shape
from skuferry.sources.base import Source
from skuferry.state.lock import run_lock
from skuferry.state.mirror import Mirror
from skuferry.state.schema import open_state
from skuferry.sync import skip
from skuferry.sync.write import fields, gone
from skuferry.sync.write.doubt import Clock, WallClock
from skuferry.sync.write.fields import Ownership
from skuferry.sync.write.gone import GonePolicy
from skuferry.sync.write.lanes import UrgentInbox

if TYPE_CHECKING:
    from skuferry.remote.client import RemoteApi


@dataclass
class Adapters:
    """The edges of a run, injectable for tests (in-memory fakes) and benchmarks."""

    source: Source | None = None
    client: RemoteApi | None = None
    urgent: UrgentInbox | None = None  # the daemon's hooks: keys for the running run's lane
    clock: Clock | None = None  # the run's time (and the mirror's): walks, waits for the list


def open_mirror(
    stack: ExitStack, settings: Settings, adapters: Adapters, *, dry_run: bool = False
) -> Mirror:
    """The state a run works on, closed with ``stack``: under the run lock (a dry run opens
    it read-only and takes none), timed by the run's clock (an injected one times the
    mirror's records too: a create's doubt is measured on it), keeping history as
    ``[state] history_days`` says. One home for sync, undo and accept-shape."""
    if not dry_run:
        stack.enter_context(run_lock(settings.state.path))
    clock = {} if adapters.clock is None else {"clock": adapters.clock}
    mirror = Mirror(settings.state.path, readonly=dry_run, **clock)
    stack.callback(mirror.close)
    mirror.keep_history = settings.state.history_days > 0
    return mirror


@dataclass(frozen=True)
class Policies:
    """What a run decides by, derived from the settings alone: the quick lane's record
    keeps the same figures for the run it may skip."""

    gone: GonePolicy
    archiving: str | None  # the [gone] patch's digest: archive, not gone (None: leave)
    pending: tuple[State, ...]  # work a run does even on the same source
    ownership: Ownership

    @classmethod
    def of(cls, settings: Settings) -> Policies:
        gone = GonePolicy.from_settings(settings.gone)
        return cls(
            gone,
            gone.archiving,
            skip.pending_states(settings),
            Ownership.from_mapping(settings.mapping),
        )


@dataclass
class RunContext:
    """One run's settings, flags, edges and the policies derived from them, once."""

    settings: Settings
    options: RunOptions
    mirror: Mirror
    summary: RunSummary
    stack: ExitStack  # what the run opened, closed when it ends
    stop: threading.Event
    adapters: Adapters
    on_progress: Progress | None = None
    run_id: int | None = None  # the runs table's row (None: a dry run records none)
    # derived from the settings, once
    gone_policy: GonePolicy = field(init=False)
    archiving: str | None = field(init=False)  # the [gone] patch's digest: archive, not gone
    pending: tuple[State, ...] = field(init=False)  # work a run does even on the same source
    ownership: Ownership = field(init=False)
    clock: Clock = field(init=False)
    _client: RemoteApi | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        policies = Policies.of(self.settings)
        self.gone_policy, self.archiving = policies.gone, policies.archiving
        self.pending, self.ownership = policies.pending, policies.ownership
        self.clock = self.adapters.clock or WallClock()

    @property
    def dry_run(self) -> bool:
        return self.options.dry_run

    @property
    def ledger(self) -> Ledger:
        """Every pull and walk of the run reports its verdict here (the summary's)."""
        return self.summary.completeness

    @functools.cached_property
    def contract(self) -> Shape | None:
        """The source's shape the state learnt (or was told to accept): the contract this
        run's pull is held to; None before the first whole pull."""
        return self.mirror.learned_shape()

    @property
    def source(self) -> Source | None:
        """An injected source (tests, benchmarks); None: opened from ``[source]``."""
        return self.adapters.source

    @property
    def inbox(self) -> UrgentInbox | None:
        """The daemon's inbox: keys pushed while this run writes."""
        return self.adapters.urgent

    def guard_gone(self, leaving: int, known: int) -> None:
        """Refuse a plan that would archive or mark gone too much of the catalog at once
        (unless forced), whatever the ``[gone]`` action."""
        gone.guard(
            leaving,
            known,
            max_ratio=self.settings.safety.max_gone_ratio,
            force=self.options.force,
            archiving=self.archiving is not None,
        )

    def sending(self, updates: Iterable[Action]) -> int:
        """How many of the planned ``updates`` would send something (``fields.changes``
        against what was last sent): one whose only difference is a field the source no
        longer gives (accepted as gone) sends nothing, and changes nothing on the CMS."""
        count = 0
        for action in updates:
            if action.product is None or action.key is None:
                continue
            sent = self.mirror.payload(action.key)
            if sent is None or fields.changes(action.product.payload, sent, self.ownership):
                count += 1
        return count

    def client(self) -> RemoteApi:
        """The run's API client, built on first use (a skipped run may never send) with its
        budgets; closed with the run. An injected one is used as it is."""
        if self._client is None:
            self._client = self.adapters.client or self._built_client()
        return self._client

    def _built_client(self) -> RemoteApi:
        from skuferry.remote.budget import Budget  # with httpx: only a run that sends loads them
        from skuferry.remote.client import RemoteClient
        from skuferry.state.budgetbook import BudgetBook

        settings = self.settings
        keys = [fingerprint(key) for key in settings.api_keys]
        state_file = functools.partial(open_state, settings.state.path)
        # Room is kept for urgent writes where they may come at any moment: a daemon's
        # run that hears hooks or a watched export (its inbox); elsewhere once one shows up.
        budget = Budget.from_settings(
            settings.budget,
            BudgetBook(state_file),
            keys=keys,
            hears_urgent=self.inbox is not None,
        )
        self.stack.callback(budget.close)
        if self.on_progress is not None:  # the terminal bar: time left and waits told by the budget
            self.on_progress.watch_budget(budget)
        client = RemoteClient.from_settings(settings, stop=self.stop, budget=budget)
        self.stack.callback(client.close)
        return client
