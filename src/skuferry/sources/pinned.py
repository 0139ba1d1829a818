"""One request that follows redirects by hand, each hop through the client's origin gate.

httpx's own ``follow_redirects`` would carry the client's default headers (a
bearer token, an API-key header) to wherever a ``Location`` points. Here every
hop, the first included, is sent through a client built by ``gated_client``, whose
gate refuses a request to any origin but the configured one and the
``allowed_origins`` before anything is sent there; the refusal is named here, with
what was being fetched.

The method and body of each hop are RFC 9110's (§15.4), as httpx chooses them:
307 and 308 repeat the request as it was (a POST stays a POST with its body: a
GraphQL query, a POST-paged API's filter); 303 turns it into a GET without a
body, and so do 301 and 302 for a POST (what every client does); any other
request keeps its method through a 301 or 302.
"""

from __future__ import annotations

import httpx

from skuferry import logs
from skuferry.errors import SourceError
from skuferry.net.origins import origin
from skuferry.net.transport import OffOriginError

log = logs.get(__name__)

MAX_REDIRECTS = 10


def send_pinned(
    client: httpx.Client,
    request: httpx.Request,
    *,
    where: str,
    max_redirects: int = MAX_REDIRECTS,
) -> httpx.Response:
    """The streamed (still open) response at the end of the redirects from ``request``.

    ``client`` is a ``gated_client`` pinned to the configured origins (it follows no
    redirect itself); ``where`` prefixes every error
    (``http https://pim.example.com/...: page 2``).
    """
    for _hop in range(max_redirects + 1):
        try:
            response = client.send(request, stream=True)
        except OffOriginError as exc:
            raise SourceError(f"{where}: {exc}") from None
        if not response.has_redirect_location:
            return response
        response.close()
        request = _next_hop(client, request, response)
        log.debug("source.redirect", to=str(origin(str(request.url))), status=response.status_code)
    raise SourceError(f"{where}: more than {max_redirects} redirects")


# Not carried to the next hop: Host and the length are the new request's own, and the
# credentials are put on again by the client (its headers, its auth) for the new hop.
_NOT_CARRIED = frozenset({"host", "content-length", "transfer-encoding", "authorization", "cookie"})


def _next_hop(
    client: httpx.Client, request: httpx.Request, response: httpx.Response
) -> httpx.Request:
    """The request ``response`` redirects ``request`` to (RFC 9110 §15.4)."""
    url = request.url.join(response.headers["Location"])
    status = response.status_code
    method = request.method
    if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
        return client.build_request("GET", url)  # the body is dropped with the method
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_CARRIED}
    return client.build_request(method, url, headers=headers, content=request.content or None)
