"""Dynamics 365 Business Central API v2.0 and its Microsoft identity platform token endpoint.

Written from Microsoft Learn: "OAuth 2.0 client credentials flow on the Microsoft identity
platform" (token request: form body ``grant_type=client_credentials``, ``client_id``,
``client_secret``, ``scope=https://api.businesscentral.dynamics.com/.default``; answer
``token_type``/``expires_in``/``access_token``, no refresh token; error body ``error``,
``error_description`` "AADSTS…", ``error_codes``, ``trace_id``, ``correlation_id``),
Business Central "item resource type" (v2.0: ``number``, ``displayName``, ``gtin``,
``unitPrice`` and ``inventory`` as JSON numbers, ``blocked``, ``lastModifiedDateTime``),
"Using filtering in API calls" / OData v4 (``$filter``, ``$count``, ``@odata.nextLink``,
``Prefer: odata.maxpagesize``), and "Working with API limits" / error codes
(``Authentication_InvalidCredentials`` 401, ``Application_TooManyRequests`` 429).

Two origins, as in production (login.microsoftonline.com and api.businesscentral…):

    IdentityServer        POST /{tenant}/oauth2/v2.0/token
    BusinessCentralServer GET  /v2.0/{tenant}/{environment}/api/v2.0/companies
                          GET  /v2.0/{tenant}/{environment}/api/v2.0/companies({id})/items
                               [?$filter=lastModifiedDateTime gt 2026-11-01T10:00:00Z
                                 [and blocked eq false]][&$count=true][&$skiptoken=…]
                          GET  …/companies({id})/items({item id})

``with BusinessCentralServer(items) as srv`` also runs ``srv.identity`` (another port;
``identity_host="127.0.0.2"`` for another host); ``srv.token_url`` and ``srv.items_url``
are the two URLs a connector is configured with.

By hand: ``python -m skuferry.sandbox.pims.business_central --port 8782 --token-port 8792``.
"""

from __future__ import annotations

import argparse
import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, quote

from skuferry.sandbox.pims.base import (
    ApiServer,
    Request,
    Response,
    Tokens,
    b64,
    run_main,
    unb64,
    utc,
)
from skuferry.sandbox.pims.catalog import Article, articles

TENANT = "5f0c8a2e-6b1d-4f3e-9a7c-2d4b6e8f0a1c"  # made-up GUIDs
CLIENT_ID = "3c9e1f7a-0b2d-4c6e-8f1a-5d7b9c2e4f60"
SECRET = "bc-secret~Qx7Vn2Kp9"  # test value
ENVIRONMENT = "production"
COMPANY = "a1b2c3d4-0000-4000-8000-00000000c0de"
SCOPE = "https://api.businesscentral.dynamics.com/.default"
MAX_PAGE = 20000  # Business Central's own page size when no Prefer header is sent

_ITEMS = re.compile(
    r"^/v2\.0/(?P<tenant>[^/]+)/(?P<env>[^/]+)/api/v2\.0/"
    r"companies\((?P<company>[^)]+)\)/items(?:\((?P<item>[^)]+)\))?$"
)
_COMPANIES = re.compile(r"^/v2\.0/(?P<tenant>[^/]+)/(?P<env>[^/]+)/api/v2\.0/companies$")
_CLAUSE = re.compile(
    r"^(?P<field>lastModifiedDateTime|blocked|number)\s+(?P<op>eq|ne|gt|ge|lt|le)\s+"
    r"(?P<value>'[^']*'|true|false|\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:\d\d)?)$"
)


def item(a: Article) -> dict[str, Any]:
    """A Business Central item: numbers as JSON numbers, ``gtin`` text ("" when none)."""
    return {
        "id": str(uuid.UUID(int=(0xB0 << 120) + a.index + 1)),
        "number": a.sku,
        "displayName": a.name,
        "displayName2": "",
        "type": "Inventory",
        "itemCategoryId": str(uuid.UUID(int=(0xCA << 120) + len(a.category))),
        "itemCategoryCode": a.category.upper(),
        "blocked": not a.enabled,
        "gtin": a.ean or "",
        "inventory": a.stock,
        "unitPrice": a.price,  # Decimal, sent as a JSON number (12.5, 899)
        "priceIncludesTax": False,
        "unitCost": a.price * 6 / 10,
        "taxGroupCode": "STANDARD",
        "baseUnitOfMeasureCode": "STK",
        "generalProductPostingGroupCode": "HANDEL",
        "inventoryPostingGroupCode": "HANDEL",
        "lastModifiedDateTime": _odata_time(a.updated),
    }


def make_items(n: int) -> list[dict[str, Any]]:
    return [item(a) for a in articles(n)]


def _odata_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def _trace() -> str:
    return str(uuid.uuid4())


class IdentityServer(ApiServer):
    """The Microsoft identity platform's v2.0 token endpoint, client credentials only."""

    name = "identity"

    def __init__(
        self,
        tokens: Tokens,
        *,
        tenant: str = TENANT,
        client_id: str = CLIENT_ID,
        secret: str = SECRET,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.tokens, self.tenant, self.client = tokens, tenant, (client_id, secret)

    def handle(self, request: Request) -> Response:
        parts = request.path.strip("/").split("/")
        if request.method != "POST" or parts[1:] != ["oauth2", "v2.0", "token"]:
            return Response(404, b"")
        self.count("token")
        if parts[0] != self.tenant:
            return _aad(400, "invalid_request", 90002, f"Tenant '{parts[0]}' not found.")
        form = {k: v[-1] for k, v in _form(request.body).items()}
        if form.get("grant_type") != "client_credentials":
            return _aad(
                400, "unsupported_grant_type", 70003, "The app requested an unsupported grant type."
            )
        client = request.basic_auth() or (form.get("client_id", ""), form.get("client_secret"))
        if client[0] != self.client[0]:
            return _aad(
                400,
                "unauthorized_client",
                700016,
                f"Application with identifier '{client[0]}' was not found in the directory.",
            )
        if client[1] != self.client[1]:
            return _aad(
                401,
                "invalid_client",
                7000215,
                "Invalid client secret provided. "
                "Ensure the secret being sent in the request is the client secret value, "
                "not the client secret ID.",
            )
        if form.get("scope") != SCOPE:
            return _aad(
                400,
                "invalid_scope",
                1002012,
                f"The provided value for scope {form.get('scope')} is not valid.",
            )
        access, _ = self.tokens.issue(prefix="eyJ0eXAiOiJKV1Qi.")
        lifetime = self.tokens.lifetime
        return Response(
            200,
            {
                "token_type": "Bearer",
                "expires_in": lifetime,
                "ext_expires_in": lifetime,
                "access_token": access,
            },
        )


def _form(body: bytes) -> dict[str, list[str]]:
    return parse_qs(body.decode(), keep_blank_values=True)


def _aad(status: int, error: str, code: int, text: str) -> Response:
    trace = _trace()
    return Response(
        status,
        {
            "error": error,
            "error_description": f"AADSTS{code}: {text} Trace ID: {trace} Correlation ID: "
            f"{_trace()} Timestamp: {datetime.now(UTC):%Y-%m-%d %H:%M:%SZ}",
            "error_codes": [code],
            "timestamp": f"{datetime.now(UTC):%Y-%m-%d %H:%M:%SZ}",
            "trace_id": trace,
            "correlation_id": _trace(),
            "error_uri": f"https://login.microsoftonline.com/error?code={code}",
        },
    )


class BusinessCentralServer(ApiServer):
    name = "business-central"

    def __init__(
        self,
        items: Sequence[dict[str, Any]] = (),
        *,
        tenant: str = TENANT,
        client_id: str = CLIENT_ID,
        secret: str = SECRET,
        identity_host: str = "127.0.0.1",
        identity_port: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.items = list(items)
        self.tenant = tenant
        self.tokens = Tokens(lifetime=3599)
        self.identity = IdentityServer(
            self.tokens,
            tenant=tenant,
            client_id=client_id,
            secret=secret,
            host=identity_host,
            port=identity_port,
        )

    @property
    def token_url(self) -> str:
        return f"{self.identity.url}/{self.tenant}/oauth2/v2.0/token"

    @property
    def api_root(self) -> str:
        return f"{self.url}/v2.0/{self.tenant}/{ENVIRONMENT}/api/v2.0"

    @property
    def items_url(self) -> str:
        return f"{self.api_root}/companies({COMPANY})/items"

    def start(self) -> BusinessCentralServer:
        self.identity.start()
        super().start()
        return self

    def stop(self) -> None:
        super().stop()
        self.identity.stop()

    def touch(self, number: str, when: datetime, name: str = "geändert") -> None:
        with self.lock:
            for it in self.items:
                if it["number"] == number:
                    it["displayName"], it["lastModifiedDateTime"] = name, _odata_time(when)
                    return
        raise KeyError(number)

    def error_body(self, status: int) -> Any:
        if status == 429:
            return _odata_error(
                "Application_TooManyRequests",
                "Too many requests reached.  Actual (601).  Maximum (600).",
            )
        return _odata_error("Internal_ServerError", f"Injected error {status}.")

    def handle(self, request: Request) -> Response:
        if request.method != "GET":
            return Response(405, _odata_error("BadRequest_MethodNotAllowed", "Not allowed."))
        state = self.tokens.check(request.bearer())
        if state != "ok":
            return Response(
                401,
                _odata_error(
                    "Authentication_InvalidCredentials",
                    f"The server has rejected the client credentials.  CorrelationId:  {_trace()}.",
                ),
                {
                    "WWW-Authenticate": f'Bearer authorization_uri="https://login.microsoftonline.com/'
                    f'{self.tenant}/oauth2/authorize", error="invalid_token"'
                },
            )
        if (m := _COMPANIES.match(request.path)) is not None:
            return Response(
                200,
                {
                    "@odata.context": f"{self.api_root}/$metadata#companies",
                    "value": [
                        {"id": COMPANY, "name": "CRONUS DE", "displayName": "CRONUS Möbel GmbH"}
                    ],
                },
            )
        m = _ITEMS.match(request.path)
        if m is None or m["tenant"] != self.tenant or m["company"] != COMPANY:
            return Response(
                404, _odata_error("BadRequest_NotFound", "The request URI is not valid.")
            )
        if m["item"]:
            with self.lock:
                found = [i for i in self.items if i["id"] == m["item"]]
            if not found:
                return Response(
                    404, _odata_error("Internal_RecordNotFound", "The Item does not exist.")
                )
            return Response(
                200,
                {
                    "@odata.context": f"{self.api_root}/$metadata#companies"
                    f"({COMPANY})/items/$entity",
                    **found[0],
                },
            )
        return self._items(request)

    def _items(self, request: Request) -> Response:
        try:
            matching = self._filter(request.arg("$filter"))
        except ValueError as exc:
            return Response(400, _odata_error("BadRequest", str(exc)))
        matching.sort(key=lambda i: str(i["number"]))
        prefer = re.search(r"odata\.maxpagesize=(\d+)", request.header("prefer") or "")
        size = min(int(prefer[1]), MAX_PAGE) if prefer else MAX_PAGE
        skip = request.arg("$skiptoken")
        start = 0 if not skip else sum(1 for i in matching if i["number"] <= unb64(skip))
        page = start // size + 1
        if (fault := self.page_fault(page)) is not None:
            return fault
        self.count("items")
        chunk = matching[start : start + size]
        body: dict[str, Any] = {
            "@odata.context": f"{self.api_root}/$metadata#companies({COMPANY})/items",
        }
        if request.arg("$count") == "true":
            body["@odata.count"] = len(matching)
        body["value"] = [{"@odata.etag": f'W/"JzE5OzE{i["number"]}MTswMDsn"', **i} for i in chunk]
        if start + size < len(matching):
            kept = [
                f"{k}={quote(v[-1], safe=',:')}"
                for k, v in request.query.items()
                if k != "$skiptoken"
            ]
            kept.append(f"$skiptoken={b64(str(chunk[-1]['number']))}")
            body["@odata.nextLink"] = f"{self.items_url}?{'&'.join(kept)}"
        headers = {"OData-Version": "4.0"}
        if prefer:
            headers["Preference-Applied"] = f"odata.maxpagesize={size}"
        return Response(200, body, headers)

    def _filter(self, expression: str | None) -> list[dict[str, Any]]:
        with self.lock:
            items = list(self.items)
        if not expression:
            return items
        for clause in re.split(r"\s+and\s+", expression.strip()):
            m = _CLAUSE.match(clause.strip())
            if m is None:
                raise ValueError(f"Could not parse the filter clause '{clause}'.")
            items = [i for i in items if _compare(i, m["field"], m["op"], m["value"])]
        return items


def _compare(it: dict[str, Any], field: str, op: str, raw: str) -> bool:
    value: Any
    if field == "lastModifiedDateTime":
        mine, value = utc(it[field]), utc(raw)
    elif field == "blocked":
        mine, value = it[field], raw == "true"
    else:
        mine, value = it[field], raw.strip("'")
    return bool(
        {
            "eq": mine == value,
            "ne": mine != value,
            "gt": mine > value,
            "ge": mine >= value,
            "lt": mine < value,
            "le": mine <= value,
        }[op]
    )


def _odata_error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def main(argv: Sequence[str] | None = None) -> None:
    def build(args: argparse.Namespace) -> tuple[ApiServer, dict[str, Any]]:
        server = BusinessCentralServer(
            make_items(args.products),
            host=args.host,
            port=args.port,
            identity_host=args.host,
            identity_port=args.token_port,
        )
        server.identity.start()
        return server, {
            "items_url": server.items_url,
            "token_url": server.token_url,
            "client_id": CLIENT_ID,
            "client_secret": SECRET,
            "scope": SCOPE,
        }

    def extra(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--token-port", type=int, default=8792, help="the token endpoint's")

    run_main(
        argv,
        extra=extra,
        description="Business Central API v2.0 test server",
        default_port=8782,
        build=build,
    )


if __name__ == "__main__":
    main()
