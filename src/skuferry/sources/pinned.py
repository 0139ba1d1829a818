"""One GET that follows redirects by hand, checking each hop's origin before sending to it.

httpx's own ``follow_redirects`` would carry the client's default headers (a
bearer token, an API-key header) to wherever a ``Location`` points. Here every
hop, the first included, passes ``origins.check_same_origin`` before anything
is sent there, so credentials reach only the configured origin and the
``allowed_origins``.
"""

from __future__ import annotations

import httpx

from skuferry import logs
from skuferry.errors import SourceError
from skuferry.net.origins import Origin, check_same_origin, origin

log = logs.get(__name__)

MAX_REDIRECTS = 10


def send_pinned(
    client: httpx.Client,
    request: httpx.Request,
    *,
    home: str,
    allowed: frozenset[Origin],
    where: str,
    max_redirects: int = MAX_REDIRECTS,
) -> httpx.Response:
    """The streamed (still open) response at the end of the redirects from ``request``.

    ``home`` is the configured URL whose origin the credentials belong to; ``where``
    prefixes every error (``http https://pim.example.com/...: page 2``). The client
    must not follow redirects itself.
    """
    for _hop in range(max_redirects + 1):
        try:
            check_same_origin(home, str(request.url), allowed)
        except SourceError as exc:
            raise SourceError(f"{where}: {exc}") from None
        response = client.send(request, stream=True)
        if not response.has_redirect_location:
            return response
        response.close()
        request = client.build_request("GET", request.url.join(response.headers["Location"]))
        log.debug("source.redirect", to=str(origin(str(request.url))), status=response.status_code)
    raise SourceError(f"{where}: more than {max_redirects} redirects")
