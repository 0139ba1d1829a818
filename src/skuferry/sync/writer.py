"""Sending creates and updates through a small bounded pool, journalled in the mirror.

Only the calling thread touches the mirror: it commits the intent, hands the
HTTP call to a worker, and commits the outcome when the future completes. The
workers only talk HTTP (their pace is set by the shared budget inside the
client, not by the pool): ``max_in_flight`` requests overlap their latency.

Outcomes, per product:
- created / updated: committed with the remote id and digest;
- Rejected (4xx): marked rejected with the server's message, not resent until the data change;
- OutcomeUnknown: the intent stays open; the engine resolves it by lookup, never by re-POST;
- RateLimited / QuotaExceeded / Interrupted: not applied, marked failed, retried next run;
- AuthError, Unreachable, BadResponse, a 404 on the collection: the run ends (``fatal``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from skuferry import errors, logs
from skuferry.models import Action, Kind, Product
from skuferry.state.mirror import Mirror

log = logs.get(__name__)


class WriteClient(Protocol):
    def create_product(self, payload: dict[str, Any]) -> dict[str, Any]: ...
    def get_product(self, product_id: str) -> dict[str, Any]: ...
    def update_product(
        self, product_id: str, payload: dict[str, Any], *, method: Literal["patch", "put"]
    ) -> dict[str, Any]: ...


@dataclass
class WriteResults:
    created: int = 0
    updated: int = 0
    drift: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # key -> reason
    unknown: list[Product] = field(default_factory=list)  # outcome unknown: intent open
    missing: list[Product] = field(default_factory=list)  # remote id 404'd: deleted remotely
    fatal: errors.SkuferryError | None = None
    notes: list[str] = field(default_factory=list)


class Writer:
    def __init__(
        self,
        client: WriteClient,
        mirror: Mirror,
        *,
        run_id: int | None,
        update_method: Literal["patch", "put", "none"],
        max_in_flight: int,
        stop: threading.Event | None = None,
        on_done: Callable[[], None] | None = None,
    ) -> None:
        self._client = client
        self._mirror = mirror
        self._run_id = run_id
        self._method = update_method
        self._max = max_in_flight
        self._stop = stop or threading.Event()
        self._on_done = on_done or (lambda: None)
        self.results = WriteResults()
        self._updates_confirmed = False  # set by the first update the server accepts
        self._updates_off_reason: str | None = (
            'updates are off ([api] update_method = "none")' if update_method == "none" else None
        )

    @property
    def stopped(self) -> bool:
        return self._stop.is_set() or self.results.fatal is not None

    def run(self, actions: Iterable[Action]) -> WriteResults:
        pending: set[Future[dict[str, Any]]] = set()
        jobs: dict[Future[dict[str, Any]], Action] = {}
        with ThreadPoolExecutor(max_workers=self._max, thread_name_prefix="skuferry-write") as pool:
            for action in actions:
                if self.stopped:
                    break
                while len(pending) >= self._max:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in done:
                        self._finish(jobs.pop(fut), fut)
                probing = (
                    action.kind is Kind.UPDATE
                    and not self._updates_confirmed
                    and self._updates_off_reason is None  # drift needs no request at all
                )
                if probing:
                    # The first update goes out alone: if the server lacks the method, exactly
                    # one request learns it, not a pool-full of them.
                    for done_fut in _as_done(pending):
                        self._finish(jobs.pop(done_fut), done_fut)
                    pending = set()
                submitted = self._submit(pool, action)
                if submitted is None:
                    continue
                if probing:
                    wait([submitted])
                    self._finish(action, submitted)
                    continue
                jobs[submitted] = action
                pending.add(submitted)
            # Whatever is in flight finishes and is committed, even when stopping.
            for fut in _as_done(pending):
                self._finish(jobs.pop(fut), fut)
        return self.results

    def _submit(self, pool: ThreadPoolExecutor, action: Action) -> Future[dict[str, Any]] | None:
        product = _product(action)
        if action.kind is Kind.CREATE:
            self._mirror.open_intent(product, run_id=self._run_id)  # committed before the POST
            return pool.submit(self._client.create_product, product.payload)
        if self._updates_off_reason is not None:
            self._mirror.record_drift(product, self._updates_off_reason)
            self.results.drift += 1
            self._on_done()
            return None
        method: Literal["patch", "put"] = "put" if self._method == "put" else "patch"
        return pool.submit(
            self._client.update_product, _remote_id(action), product.payload, method=method
        )

    def _finish(self, action: Action, fut: Future[dict[str, Any]]) -> None:
        product = _product(action)
        try:
            data = fut.result()
        except errors.SkuferryError as exc:
            self._failed(action, product, exc)
        else:
            if action.kind is Kind.UPDATE:
                self._updates_confirmed = True
            if action.kind is Kind.CREATE:
                self._mirror.record_created(product, str(data["id"]))
                self.results.created += 1
                log.debug("sync.created", key=product.key, remote_id=data["id"])
            else:
                self._mirror.record_updated(product, _remote_id(action))
                self.results.updated += 1
                log.debug("sync.updated", key=product.key, remote_id=action.remote_id)
        self._on_done()

    def _failed(self, action: Action, product: Product, exc: errors.SkuferryError) -> None:
        creating = action.kind is Kind.CREATE
        key = product.key
        if isinstance(exc, errors.Rejected):
            self._mirror.record_rejected(product, exc.message or str(exc))
            self.results.rejected.append({"key": key, "line": product.line, "reason": str(exc)})
            log.warning(
                "sync.rejected", key=key, line=product.line, status=exc.status, reason=exc.message
            )
        elif isinstance(exc, errors.OutcomeUnknown | errors.BadResponse) and creating:
            # The POST may have landed: keep the intent open and resolve it by lookup.
            self._mirror.record_failed(key, f"outcome unknown: {exc}", product=product)
            self.results.unknown.append(product)
            log.warning("sync.create.unknown", key=key, error=str(exc))
            if isinstance(exc, errors.BadResponse):
                self.results.fatal = exc
        elif isinstance(exc, errors.MethodNotAllowed) or (
            isinstance(exc, errors.NotFound) and not creating and self._route_missing(action)
        ):
            self._updates_off(exc)
            self._mirror.record_drift(product, self._updates_off_reason or str(exc))
            self.results.drift += 1
        elif isinstance(exc, errors.NotFound) and not creating:
            self._mirror.record_remote_missing(key)
            self.results.missing.append(product)
            log.warning("sync.update.missing", key=key, remote_id=action.remote_id)
        else:
            if creating:
                self._mirror.close_intent(key)  # provably not applied: nothing to look up
            self._mirror.record_failed(key, str(exc), product=product)
            self.results.failed[key] = str(exc)
            if isinstance(
                exc, errors.AuthError | errors.Unreachable | errors.NotFound | errors.TransportError
            ):
                self.results.fatal = self.results.fatal or exc
            elif not isinstance(exc, errors.Interrupted):
                log.warning("sync.write.failed", key=key, error=str(exc))

    def _route_missing(self, action: Action) -> bool:
        """A 404 on PATCH/PUT: is the product gone, or does the server lack the route?"""
        try:
            self._client.get_product(_remote_id(action))
        except errors.NotFound:
            return False
        except errors.SkuferryError:
            return False
        return True  # the product exists, so the 404 was for the method route itself

    def _updates_off(self, exc: errors.HttpError) -> None:
        if self._updates_off_reason is not None:
            return
        method = "PUT" if self._method == "put" else "PATCH"
        self._updates_off_reason = (
            f"the API does not accept {method} /api/v1/products/:id (HTTP {exc.status}); "
            "changed products are reported as drift"
        )
        note = (
            f"{self._updates_off_reason}. Updates are off for the rest of this run; "
            f"set [api] update_method to {'patch' if method == 'PUT' else 'put'} or none."
        )
        self.results.notes.append(note)
        log.error("sync.updates.unsupported", method=method, status=exc.status)


def _product(action: Action) -> Product:
    if action.product is None:
        raise RuntimeError(f"write action without a product: {action}")
    return action.product


def _remote_id(action: Action) -> str:
    if action.remote_id is None:
        raise RuntimeError(f"update action without a remote id: {action.key}")
    return action.remote_id


def _as_done(pending: set[Future[dict[str, Any]]]) -> Iterable[Future[dict[str, Any]]]:
    while pending:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        yield from done
