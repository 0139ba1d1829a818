"""``Sandbox``: start, drive, inspect and stop a local CMS API from Python."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from skuferry import logs
from skuferry.errors import UsageError
from skuferry.sandbox.api import Api
from skuferry.sandbox.config import UPDATE_CHOICES, SandboxConfig, Updates
from skuferry.sandbox.faults import Faults
from skuferry.sandbox.handler import SandboxServer
from skuferry.sandbox.limits import Mode, TierLimit, min_elapsed
from skuferry.sandbox.stats import SandboxStats

log = logs.get(__name__)

_STOP_WAIT_S = 5.0  # longest stop() waits for a connection thread after waking it
_POLL_S = 0.05  # how often serve_forever looks for a shutdown request


class Sandbox:
    """A spec-faithful CMS API on 127.0.0.1, in daemon threads of this process.

    ``with Sandbox() as sb: httpx.get(sb.url + "/api/v1/products", headers=...)``
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config if config is not None else SandboxConfig()
        if self.config.updates not in (None, *UPDATE_CHOICES):
            raise UsageError(f"updates must be one of {UPDATE_CHOICES} or None")
        self._api = Api(self.config)
        self._server: SandboxServer | None = None
        self._thread: threading.Thread | None = None
        self._url: str | None = None

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> str:
        """Bind (port 0 = any free port), serve in a daemon thread, return the base URL."""
        if self._server is not None:
            raise UsageError("the sandbox is already running")
        self._api.restart_clock()  # windows align to the start, not to construction
        server = SandboxServer((self.config.host, self.config.port), self._api)
        host, port = server.server_address[:2]
        self._server = server
        self._url = f"http://{host!s}:{port}"
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": _POLL_S},
            name="skuferry-sandbox",
            daemon=True,
        )
        self._thread.start()
        log.info("sandbox.started", url=self._url, mode=self._api.limiter.mode)
        return self._url

    def stop(self) -> None:
        """Stop serving and close every socket; slow answers in flight are cut short."""
        server, self._server = self._server, None
        if server is None:
            return
        server.stopping.set()
        server.shutdown()
        server.server_close()
        server.close_connections(timeout_s=_STOP_WAIT_S)
        if self._thread is not None:
            self._thread.join(_STOP_WAIT_S)
            self._thread = None
        log.info("sandbox.stopped", url=self._url)

    def __enter__(self) -> Sandbox:
        if self._server is None:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._url is None:
            raise UsageError("the sandbox has not been started")
        return self._url

    # -- inspection --------------------------------------------------------------------

    def stats(self) -> SandboxStats:
        return self._api.snapshot()

    def reset_stats(self) -> None:
        self._api.stats.clear()

    def reset(self) -> None:
        """Forget every product, content item, statistic and spent rate budget."""
        self._api.reset()

    def products(self, workspace: str = "default") -> list[dict[str, Any]]:
        """The stored products of ``workspace``, in insertion order (copies)."""
        return self._api.products.all(workspace)

    def updates_received(self, workspace: str = "default") -> list[dict[str, Any]]:
        """Each accepted product PATCH/PUT, oldest first: ``{"method", "id", "body"}``."""
        return self._api.received.list(workspace)

    def edit_product(
        self, record_id: str, fields: Mapping[str, Any], workspace: str = "default"
    ) -> dict[str, Any]:
        """A staff edit in the CMS: merge ``fields`` into a product (not counted, no limits)."""
        record = self._api.products.merge(workspace, record_id, fields)
        if record is None:
            raise UsageError(f"no product {record_id} in workspace {workspace!r}")
        return dict(record)

    def min_elapsed_for(self, n_writes: int, *, keys: int = 1) -> float:
        """Shortest time these limits allow from the first to the n-th write of a workspace.

        ``keys`` keys of one workspace writing together share its workspace cap.
        """
        limit = self._api.limiter.limits["write"]
        per_minute = min(limit.per_key * max(1, keys), limit.per_workspace)
        return min_elapsed(n_writes, per_minute, self._api.limiter.mode, self._api.limiter.burst)

    # -- control ----------------------------------------------------------------------

    @property
    def faults(self) -> Faults:
        return self._api.faults.faults

    def set_faults(self, faults: Faults) -> None:
        """Replace the fault settings, effective from the next request."""
        self._api.faults.set(faults)

    def seed_products(
        self, items: Iterable[Mapping[str, Any]], workspace: str = "default"
    ) -> list[dict[str, Any]]:
        """Bulk insert (no validation, no limits, not counted): pre-existing products."""
        return [dict(p) for p in self._api.products.create_many(workspace, items)]

    def add_key(self, key: str, workspace: str) -> None:
        self._api.add_key(key, workspace)

    def revoke_key(self, key: str) -> None:
        """Refuse ``key`` from the next request on (401 UNAUTHORIZED), as a revoked key."""
        if not self._api.revoke_key(key):
            raise UsageError("no such key in the sandbox")

    def set_limits(
        self,
        limits: Mapping[str, TierLimit] | None = None,
        *,
        mode: Mode | None = None,
        **tiers: TierLimit,
    ) -> None:
        """Change limits per tier (others keep theirs) and/or the mode; budgets start fresh.

        ``sb.set_limits(write=TierLimit(per_key=2, per_workspace=3), mode="bucket")``
        """
        self._api.set_limits({**(limits or {}), **tiers}, mode)

    def set_updates(self, updates: Updates | None) -> None:
        """Turn PATCH and/or PUT /api/v1/products/:id on, or off (None: 405)."""
        if updates not in (None, *UPDATE_CHOICES):
            raise UsageError(f"updates must be one of {UPDATE_CHOICES} or None")
        self._api.updates = updates
