"""Settings of one sandbox; every field has the spec's (or a harmless) default."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from skuferry.sandbox.faults import Faults
from skuferry.sandbox.limits import Mode, TierLimit, default_limits

Updates = Literal["patch", "put", "both"]
UPDATE_CHOICES: tuple[Updates, ...] = ("patch", "put", "both")
DEFAULT_KEY = "sandbox-key"
DEFAULT_WORKSPACE = "default"


def _default_keys() -> dict[str, str]:
    return {DEFAULT_KEY: DEFAULT_WORKSPACE}


@dataclass
class SandboxConfig:
    """How a sandbox behaves.

    ``keys`` maps API keys to workspaces. ``limits`` maps a tier (read, write,
    expensive, egress) to its per-key and per-workspace requests per minute;
    ``key_limits`` / ``workspace_limits`` (tier -> per minute) override one side
    of it, e.g. ``key_limits={"write": 5}``.
    ``updates`` says which of ``PATCH``/``PUT /api/v1/products/:id`` are served
    (default PATCH, what a newcomer's first price change needs; None: 405 to both,
    the strict reading of the spec, which lists neither: ``skuferry sandbox --strict``).
    ``latency_s`` delays every response, on top of any
    ``faults.latency_s``. ``clock`` (seconds, monotonic) drives rate limits and
    stats; tests may inject one. ``burst`` (bucket mode only) makes each bucket
    hold fewer than a minute's requests, refilled at the same rate: a gateway.
    """

    keys: dict[str, str] = field(default_factory=_default_keys)
    limits: dict[str, TierLimit] = field(default_factory=default_limits)
    key_limits: dict[str, int] | None = None
    workspace_limits: dict[str, int] | None = None
    mode: Mode = "window"
    burst: int | None = None
    updates: Updates | None = "patch"
    faults: Faults = field(default_factory=Faults)
    seed: int = 0
    latency_s: float = 0.0
    host: str = "127.0.0.1"
    port: int = 0
    key_field: str = "sku"
    required_fields: tuple[str, ...] = ("sku", "name")
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        limits = dict(self.limits)
        for tier, n in (self.key_limits or {}).items():
            old = limits.get(tier, TierLimit(per_key=n, per_workspace=n))
            limits[tier] = TierLimit(per_key=n, per_workspace=old.per_workspace)
        for tier, n in (self.workspace_limits or {}).items():
            old = limits.get(tier, TierLimit(per_key=n, per_workspace=n))
            limits[tier] = TierLimit(per_key=old.per_key, per_workspace=n)
        self.limits = limits
