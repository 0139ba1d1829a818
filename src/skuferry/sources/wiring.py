"""``Wiring``: what a source that talks to a server is handed from outside, in one value.

The network (``transport``), time (``clock``, ``sleep``), chance (``rng``), the
environment its secrets may be read from (``env``), the run's stop request
(``stop``) and the TLS trust (``verify``). A run hands the defaults, except its stop
event; tests hand a mock transport, a fake clock, a seeded ``rng``. One value passed
down (source, connection, credentials, token endpoint) instead of the same seven
arguments written out at every level.
"""

from __future__ import annotations

import random
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a file source's run need not import httpx for this
    import httpx


@dataclass(frozen=True, slots=True)
class Wiring:
    """The outside world of one API source; every field has the real world as default."""

    transport: httpx.BaseTransport | None = None  # None: the network
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random | None = None  # None: a fresh, unseeded one
    # None: the process environment; left out of repr, as it may hold a token or password
    env: Mapping[str, str] | None = field(default=None, repr=False)
    stop: threading.Event | None = None  # set: waits end and the pull is interrupted
    verify: ssl.SSLContext | bool | None = None  # None: the settings' ca_bundle decides


LIVE = Wiring()  # the real world: the network, the clocks, the process environment
