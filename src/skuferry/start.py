"""``skuferry``'s entry point: the quick lane first, then the verbs.

A plain ``skuferry sync`` from cron or systemd whose source did not change is decided
by the quick lane before click, pydantic or the config models are
imported; anything else, or anything in doubt, goes on to the verbs.
"""

from __future__ import annotations

import sys


def main() -> None:
    from skuferry.service import quick

    code = quick.attempt(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from skuferry.cli import main as verbs

    verbs()
