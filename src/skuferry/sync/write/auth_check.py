"""The auth check: a run that has not talked to the API for a while makes one cheap read.

While the source does not change, a run sends no request at all, so a key revoked
on the CMS side would go unnoticed until the next change fails. With ``[api]
auth_check_minutes`` (default 60, 0 = never) a run whose own requests did not reach
the API, and whose last contact with it is older than that, makes one authenticated
read (``GET /api/v1/products?limit=1&page=1``, counted in ``requests.read``). A
401/403 ends the run like any other (``AuthError``, exit 3).

The last contact is the mirror's meta ``api.last_contact``: written at the end of
every run whose requests the API answered. A dry run never probes (it sends nothing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skuferry import logs
from skuferry.state.mirror import Mirror

if TYPE_CHECKING:
    from skuferry.remote.client import RemoteApi  # a type; importing httpx costs ~0.1 s

log = logs.get(__name__)


def due(last_contact: float | None, now: float, *, minutes: int) -> bool:
    """Whether a run that made no request of its own should probe. Pure."""
    if minutes <= 0:
        return False
    return last_contact is None or now - last_contact >= minutes * 60


def after_run(
    client: RemoteApi, mirror: Mirror, *, requests: int, minutes: int, now: float
) -> bool:
    """Record this run's contact with the API (``requests`` it sent, all answered), or probe
    when it sent none and a check is due.

    Returns True when it probed. Raises what the probe raised (``AuthError`` on 401/403).
    """
    if requests > 0:
        mirror.record_api_contact(now)
        return False
    last = mirror.last_api_contact()
    if not due(last, now, minutes=minutes):
        return False
    log.info(
        "sync.auth_check",
        last_contact_age_s=None if last is None else round(now - last),
        every_minutes=minutes,
    )
    client.probe()
    mirror.record_api_contact(now)
    return True
