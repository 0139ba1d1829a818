"""The local sandbox of the CMS API: the demo's target, the reliability suite's, the benchmarks'.

It follows the CMS's API spec (envelope, pagination, bearer keys mapped to
workspaces, per-key and per-workspace rate limits with ``Retry-After``, and the
non-idempotent ``POST /api/v1/products`` that happily stores duplicates) and
fills the spec's gaps the way its request rules document. On top it injects seeded
faults (lost responses after commit, 500s, resets, slow answers, garbage) and
counts what clients do (429s, early retries, duplicates, write timestamps).

Why the standard library (``http.server.ThreadingHTTPServer``, daemon threads)
rather than an ASGI framework:

- no dependency: ``skuferry demo`` works from a plain install;
- full control of the socket, which fault injection needs: closing a
  connection after the commit without a byte of response, or sending a TCP RST
  (``SO_LINGER`` 0) before reading the request, is awkward or impossible behind
  a framework's response abstraction;
- a thread per connection easily serves the ~50 requests per second the rate
  limits allow a workspace, which is all the sandbox is ever asked to do.

Modules: ``server`` (``Sandbox``: lifecycle and control), ``handler`` (the
wire), ``api`` (routes and behaviour, no sockets), ``limits``, ``faults``,
``store``, ``stats``, ``received`` (what each update carried), ``config``, ``cli``
(``skuferry sandbox``).

Beside it, the other side of a sync: ``pim`` (a small PIM-like JSON API that the http
source's tests, the benchmarks and the http example config pull from) and
``catalog_files`` (xlsx and BMEcat exports shaped like real ones, our own data). They
live here, not among the tests, so that the benchmarks need nothing from the tests.
"""

from skuferry.sandbox.config import DEFAULT_KEY, DEFAULT_WORKSPACE, SandboxConfig
from skuferry.sandbox.faults import Faults
from skuferry.sandbox.limits import TierLimit, default_limits
from skuferry.sandbox.server import Sandbox
from skuferry.sandbox.stats import EarlyRetry, SandboxStats

__all__ = [
    "DEFAULT_KEY",
    "DEFAULT_WORKSPACE",
    "EarlyRetry",
    "Faults",
    "Sandbox",
    "SandboxConfig",
    "SandboxStats",
    "TierLimit",
    "default_limits",
]
