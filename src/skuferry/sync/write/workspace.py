"""The CMS a run writes to is the one its state file mirrors (``state.binding``).

Asked first in every run, before the skip decision: a state file pointed at another CMS
workspace would otherwise call its products unchanged there, or update ids that name
nothing (or another shop's products). The same URL and a key in common: the same CMS,
no request. Anything else: a few products the state knows are looked up by their CMS id
(``PROBES`` reads); all found, each under its key, the workspace is the same and the
binding moves to the new URL or keys; one missing, the run is refused with nothing done
(``CmsMismatch``, exit 2). ``sync --moved-cms`` binds the state to the CMS the config
names without looking, and the run walks it (``--verify``) to find each product again.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Protocol

from skuferry import canonical, errors, logs
from skuferry.config.schema import Settings
from skuferry.models import RunOptions, RunSummary
from skuferry.state import binding
from skuferry.state.binding import Binding
from skuferry.state.mirror import Mirror

if TYPE_CHECKING:
    from skuferry.remote.client import RemoteApi

log = logs.get("skuferry.sync.engine")

PROBES = 3  # products looked up by id when the CMS may be another one


class BindRun(Protocol):
    settings: Settings
    options: RunOptions
    mirror: Mirror
    summary: RunSummary

    def client(self) -> RemoteApi: ...


def bind(run: BindRun) -> None:
    """Refuse a run whose CMS is not the one the state mirrors; bind a state to its CMS."""
    settings, mirror, options = run.settings, run.mirror, run.options
    current = Binding.of(settings.api.base_url, settings.api_keys)
    bound = binding.recorded(mirror)
    if options.moved_cms:
        _record(mirror, current)
        run.summary.notes.append(
            f"--moved-cms: the state is bound to {current.describe()} now; the CMS is walked "
            "to find each product again"
        )
        log.warning("sync.cms.moved", cms=current.describe(), before=_described(bound))
        return
    why = binding.compare(bound, current)
    if bound is not None and why is None:
        if not current.keys <= bound.keys:  # a key added to the workspace's keys
            _record(mirror, Binding(bound.base_url, bound.keys | current.keys))
        return
    known = list(itertools.islice(mirror.synced_items(), PROBES))
    lost = _look_up(run.client(), known, settings.mapping.key) if known else []
    if lost:
        shown = "; ".join(lost)
        state = settings.state.path
        before = bound.describe() if bound is not None else "another CMS (not recorded)"
        raise errors.CmsMismatch(
            f"state file {state} mirrors {before}, but this config names "
            f"{current.describe()}"
            + (f": {why}" if why else "")
            + f". The products the state knows there are not this CMS's ({shown}): another "
            "workspace? Nothing was done. Give this workspace its own [state] path; if the "
            "workspace really moved, run `skuferry sync --moved-cms` once."
        )
    _record(mirror, current)
    if bound is not None:
        run.summary.notes.append(
            f"the state's CMS is now {current.describe()} ({why}); "
            f"{len(known)} product(s) it knows were found there by id"
        )
        log.warning("sync.cms.rebound", cms=current.describe(), before=bound.describe(), why=why)


def _look_up(client: RemoteApi, known: list[tuple[str, str, str]], key_field: str) -> list[str]:
    """What of ``known`` (key, CMS id, digest) the CMS does not hold under its key."""
    lost: list[str] = []
    for key, remote_id, _digest in known:
        try:
            body = client.get_product(remote_id)
        except errors.NotFound:
            lost.append(f"{key!r}: no product {remote_id}")
            continue
        held = body.get(key_field)
        if held is None or canonical.key(str(held)) != key:  # keys compare in NFC
            lost.append(f"{key!r}: product {remote_id} is {key_field} {held!r}")
    return lost


def _record(mirror: Mirror, current: Binding) -> None:
    if not mirror.readonly:  # a dry run checks, and records nothing
        mirror.set_meta(binding.META, current.to_json())


def _described(bound: Binding | None) -> str:
    return bound.describe() if bound is not None else "none recorded"
