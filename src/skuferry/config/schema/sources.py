"""Config models of the http and sql sources (``[source] type = "http" | "sql"``).

``Settings`` puts both in the ``[source]`` union. Secrets (a bearer token, a
password) come inline (``SecretStr``), from a file, or from an environment
variable; they are resolved when the source opens, never echoed.

Relative paths (``token_file``, ``password_file``, a relative ``sqlite:///`` URL)
resolve against the config file's folder: the one being loaded, or the one given as
``context={"config_dir": <folder>}`` to ``model_validate``; else against the working
directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    JsonValue,
    PlainValidator,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from skuferry.config.expressions import SourcePathSetting
from skuferry.config.schema import reading
from skuferry.config.schema.base import Strict
from skuferry.errors import ConfigError
from skuferry.net.origins import insecure_http_problem, origin
from skuferry.net.paths import REMOTE_SCHEMES, remote_scheme, url_scheme

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP field name (RFC 9110)


def _header_name(value: str) -> str:
    if not _TOKEN.fullmatch(value):
        raise ValueError(f"{value!r} is not an HTTP header name (like X-WP-Total)")
    return value


HeaderName = Annotated[str, AfterValidator(_header_name)]


class SourceCommon(Strict):
    """Keys every ``[source]`` type takes, whatever it reads.

    The source models are built at their first use (``defer_build``): a config uses one
    source type, and building all seven cost every start ~0.1 s (the settings'
    ``SourceSettings`` validates a table with the one model its ``type`` names).
    """

    model_config = ConfigDict(defer_build=True)

    # rows in which all these source columns are empty or absent are skipped, not
    # rejected (Shopify's image-only rows): skip_if_empty = ["Variant SKU"]
    skip_if_empty: list[str] = Field(
        default_factory=list,
        description="Source columns: a record in which every one of them is empty or absent "
        "is skipped before mapping (noted in the summary, not rejected), e.g. "
        'Shopify\'s image-only rows: `["Variant SKU"]`.',
    )
    # values that count as missing, like null (Odoo's false): a field's default and
    # required apply; a field of type "boolean" keeps false as a value (the mapper's rule)
    empty_values: list[JsonValue] = Field(
        default_factory=list,
        description="Values read like a missing one (Odoo's `false`): a field's `default` "
        "and `required` apply; a `boolean` field keeps them as values.",
    )
    # a JMESPath filter: records it does not hold true for are skipped, their products gone
    where: str | None = Field(
        None,
        description="A JMESPath filter evaluated on each record after grouping, unnesting "
        "and joining: records it does not hold true for are skipped (not rejected), and "
        "their products count as gone. A record lacking a field it reads is held instead "
        "(a renamed column must not look filtered out).",
    )

    @field_validator("skip_if_empty")
    @classmethod
    def _named(cls, value: list[str]) -> list[str]:
        if any(not name.strip() for name in value):
            raise ValueError("a column name must not be empty")
        return value

    @field_validator("where")
    @classmethod
    def _filter_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            import jmespath

            try:
                jmespath.compile(value)
            except jmespath.exceptions.JMESPathError as exc:
                raise ValueError(f"not a valid JMESPath expression: {exc}") from None
        return value


def _config_dir(info: ValidationInfo) -> Path | None:
    """The config's folder: the validation's context, else the reading being loaded."""
    ctx = info.context
    if isinstance(ctx, Mapping) and ctx.get("config_dir") is not None:
        return Path(ctx["config_dir"])
    return reading.config_dir()


def _anchor(data: Any, info: ValidationInfo, keys: tuple[str, ...]) -> Any:
    """Make relative file paths in ``data`` absolute against the config folder."""
    base = _config_dir(info)
    if base is None or not isinstance(data, dict):
        return data
    out = dict(data)
    for key in keys:
        value = out.get(key)
        if isinstance(value, str | os.PathLike) and not Path(value).expanduser().is_absolute():
            out[key] = str(base / Path(value))
    return out


def _one_secret(
    value: SecretStr | None, info: ValidationInfo, key: str, *, needed: bool, why: str
) -> None:
    given = [
        name
        for name, present in (
            (key, value is not None),
            (f"{key}_file", info.data.get(f"{key}_file") is not None),
            (f"{key}_env", info.data.get(f"{key}_env") is not None),
        )
        if present
    ]
    if len(given) > 1:
        raise ValueError(f"give only one of {', '.join(given)}")
    if needed and not given:
        raise ValueError(f"{why} needs one of {key}, {key}_file or {key}_env")


AUTH_KINDS = ("none", "bearer", "basic", "header", "oauth2")


class IncrementalPull(SourceCommon):
    """How far back each incremental pull reaches, and how often a run pulls everything
    (only a full pull decides that a product is gone).

    The one home of the keys that the sources able to pull incrementally share
    (``http`` and ``graphql`` through ``ApiSourceSettings``, and ``sql``; see the
    sources' ``since_params`` and the reader's incremental pull). How the time is written
    (``since_format``) differs by source and stays in each.
    """

    since_overlap_s: float = Field(
        300.0,
        ge=0,
        description="Seconds each window reaches back before the watermark (the latest "
        "change time read, else the last pull's start): edits in flight, writers whose "
        "clocks disagree. A change time with no zone reaches back at least an hour, for "
        "the night daylight saving time ends.",
    )
    full_every: int = Field(
        24,
        ge=1,
        description="Every Nth run pulls everything; only a full pull decides that a "
        "product is gone.",
    )


class ApiSourceSettings(IncrementalPull):
    """What the API sources share (``http``, ``graphql``): the endpoint, auth, transport.

    Auth (``api_credentials``): ``bearer`` and ``header`` send a static token,
    ``basic`` a username and password, ``oauth2`` a token fetched from
    ``token_url`` (client credentials or password grant), kept in memory only.
    The client secret and password go only to ``token_url``'s origin; every
    other credential only to ``url``'s origin and ``allowed_origins``.
    """

    url: str = Field(
        description="The first page's `http://` or `https://` URL; its origin is the one "
        "credentials go to."
    )
    preset: str | None = Field(
        None,
        description="A known system whose defaults fill every key this table leaves out: "
        "`akeneo`, `shopify`, `business-central`, `odoo`, `woocommerce`, `magento` "
        "(docs/connectors.md).",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        repr=False,
        description="HTTP headers sent with every request, only to the origin of `url` "
        "(values may be secrets).",
    )

    # auth: the fields a validator reads come before the field it validates
    auth: Literal["none", "bearer", "basic", "header", "oauth2"] = Field(
        "none",
        description="`bearer` sends `token`, `header` sends `token` in `header_name`, `basic` "
        "sends `username` and `password`, `oauth2` a token from `token_url`.",
    )
    # auth = "header": X-Shopify-Access-Token, X-Api-Key, ...
    header_name: str | None = Field(
        default=None,
        validate_default=True,
        description='`auth = "header"`: the header carrying `token`, e.g. '
        "`X-Shopify-Access-Token`, `X-Api-Key`.",
    )
    token_file: Path | None = Field(None, description="A file holding the token.")
    token_env: str | None = Field(
        None,
        description="The environment variable holding the token (wins over "
        "`token_file` and `token`).",
    )
    token: SecretStr | None = Field(
        default=None, validate_default=True, description="The token, inline (avoid)."
    )
    token_url: str | None = Field(
        default=None,
        validate_default=True,
        description='`auth = "oauth2"`: where tokens are asked for; the client secret and '
        "the password go there only.",
    )
    grant: Literal["client_credentials", "password"] = Field(
        "client_credentials",
        description='`auth = "oauth2"`: the grant, `client_credentials` or `password` '
        "(with `username` and `password`).",
    )
    client_id: str | None = Field(
        default=None, validate_default=True, description='`auth = "oauth2"`: the client id.'
    )
    client_secret_file: Path | None = Field(None, description="A file holding the client secret.")
    client_secret_env: str | None = Field(
        None,
        description="The environment variable holding the client secret (wins over "
        "`client_secret_file` and `client_secret`).",
    )
    client_secret: SecretStr | None = Field(
        default=None,
        validate_default=True,
        description="The OAuth2 client secret, inline (avoid).",
    )
    scope: str | None = Field(None, description='`auth = "oauth2"`: the scope asked for.')
    client_auth: Literal["basic", "body"] = Field(
        "basic",
        description="How the client id and secret go to `token_url`: an HTTP Basic header "
        "(`basic`) or members of the body (`body`).",
    )
    token_request: Literal["form", "json"] = Field(
        "form",
        description="The token request's body: a form (`form`) or JSON (`json`, Akeneo).",
    )
    password_file: Path | None = Field(
        None, description="A file holding the password (basic auth, password grant)."
    )
    password_env: str | None = Field(
        None,
        description="The environment variable holding the password (wins over "
        "`password_file` and `password`).",
    )
    username: str | None = Field(
        default=None,
        validate_default=True,
        description="The user name (basic auth, password grant).",
    )
    password: SecretStr | None = Field(
        default=None, validate_default=True, description="The password, inline (avoid)."
    )

    # transport
    requests_per_minute: int | None = Field(
        None,
        gt=0,
        description="At most this many requests per minute to the source. Unset: no limit.",
    )
    timeout_s: float = Field(30.0, gt=0, description="Seconds to wait for one response.")
    max_retries: int = Field(
        3,
        ge=0,
        le=10,
        description="Retries of a page that failed transiently; then the pull fails as a whole.",
    )
    # security (``check_same_origin``, the config's security rules): credentials go only to
    # url's origin
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="More origins trusted with the credentials, for next links, cursor URLs "
        "and redirects (never https to http).",
    )
    allow_insecure_http: bool = Field(
        False, description="Allow an `http://` `url` to a host that is not a loopback literal."
    )
    ca_bundle: Path | None = Field(
        None,
        description="A PEM file of CA certificates for a private CA. Default: "
        "`SSL_CERT_FILE` when set, else the certifi bundle.",
    )
    max_page_bytes: int = Field(
        256 * 1024 * 1024,
        gt=0,
        description="One answer larger than this (counted as it streams in, after "
        "decompression) fails the pull. Default 256 MiB.",
    )

    # incremental pulls (see ``since_params``)
    since_format: str = Field(
        "iso8601",
        validate_default=True,
        description="How the time is written: `iso8601` (`2026-11-22T09:00:00+00:00`), "
        "`epoch` (unix seconds) or a strftime pattern (`%Y-%m-%d %H:%M:%S`).",
    )
    updated_path: SourcePathSetting | None = Field(
        None,
        description="Incremental pulls: JMESPath of a record's change time (`date_upd`, "
        "`updatedAt`), read in `since_format`. The next window starts at the latest one "
        "read, minus the overlap, in the source's own clock and zone. Unset: the window "
        "is computed from skuferry's clock, and `skuferry check` warns.",
    )

    @model_validator(mode="before")
    @classmethod
    def _relative_paths(cls, data: Any, info: ValidationInfo) -> Any:
        return _anchor(
            data, info, ("token_file", "password_file", "client_secret_file", "ca_bundle")
        )

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("header_name")
    @classmethod
    def _header_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and (not value.strip() or any(c in value for c in ": \r\n")):
            raise ValueError("must be an HTTP header name, like X-Api-Key")
        if info.data.get("auth") == "header" and not value:
            raise ValueError('auth = "header" needs header_name, like "X-Shopify-Access-Token"')
        return value

    @field_validator("token")
    @classmethod
    def _token(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        auth = info.data.get("auth")
        _one_secret(
            value, info, "token", needed=auth in ("bearer", "header"), why=f"auth = {auth!r}"
        )
        return value

    @field_validator("token_url")
    @classmethod
    def _token_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("auth") == "oauth2" and not value:
            raise ValueError('auth = "oauth2" needs token_url, where tokens are asked for')
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        if value is not None and urlsplit(value).password is not None:
            raise ValueError("put no password in the URL; use client_secret_file or _env")
        return value

    @field_validator("client_id")
    @classmethod
    def _client_id(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("auth") == "oauth2" and not value:
            raise ValueError('auth = "oauth2" needs client_id')
        return value

    @field_validator("client_secret")
    @classmethod
    def _client_secret(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        needed = info.data.get("auth") == "oauth2" and info.data.get("grant") != "password"
        _one_secret(value, info, "client_secret", needed=needed, why="the client_credentials grant")
        return value

    @field_validator("username")
    @classmethod
    def _username(cls, value: str | None, info: ValidationInfo) -> str | None:
        if _needs_password(info) and not value:
            raise ValueError(f"{_needs_password(info)} needs a username")
        return value

    @field_validator("password")
    @classmethod
    def _password(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        why = _needs_password(info)
        _one_secret(value, info, "password", needed=bool(why), why=why)
        return value

    @field_validator("since_format")
    @classmethod
    def _since_format(cls, value: str) -> str:
        return check_since_format(value)


def _needs_password(info: ValidationInfo) -> str:
    """Why a username and password are needed ("" when they are not)."""
    auth = info.data.get("auth")
    if auth == "basic":
        return 'auth = "basic"'
    if auth == "oauth2" and info.data.get("grant") == "password":
        return 'grant = "password"'
    return ""


def _template(value: str | None) -> str | None:
    if value is not None and "{since}" not in value:
        raise ValueError("must contain {since}, where the pull's start time goes")
    return value


class HttpSourceSettings(ApiSourceSettings):
    """A JSON API walked page by page (a PIM's REST endpoint, an OData feed, a JSON-RPC call)."""

    type: Literal["http"]
    # every path into a response is JMESPath (``source_path_check``); "" = the body itself
    items_path: SourcePathSetting = Field(
        "",
        description="JMESPath of the list of records in each answer (`_embedded.items`, "
        '`value`); `""`: the body itself.',
    )

    # the request: GET with query parameters, or POST with a JSON body
    method: Literal["GET", "POST"] = Field(
        "GET",
        description="`GET` with the page parameters in the query, or `POST` with `body` "
        "as JSON and the page, offset and size as members of it (Odoo).",
    )
    body: dict[str, JsonValue] | None = Field(
        default=None,
        validate_default=True,
        description='`method = "POST"`: the request\'s JSON body, a TOML table.',
    )

    # pagination; "next_link" also covers an API that does not paginate (no link: one page)
    pagination: Literal["page", "offset", "cursor", "next_link", "none"] = Field(
        "next_link",
        description="How the next page is asked for: `page` (`page_param`), `offset` "
        "(`offset_param`), `cursor` (`cursor_param` from `cursor_path`), "
        "`next_link` (`next_path`, else an RFC 8288 `Link` header; no link: one "
        "page) or `none`.",
    )
    page_size: int = Field(
        100, ge=1, le=100_000, description="Records asked for per page (sent as `size_param`)."
    )
    size_param: str = Field(
        "limit", description='The query parameter carrying `page_size`; `""`: send none.'
    )
    page_param: str = Field(
        "page", description='`pagination = "page"`: the page number\'s query parameter.'
    )
    first_page: int = Field(
        1, ge=0, description='`pagination = "page"`: the number of the first page.'
    )
    offset_param: str = Field(
        "offset", description='`pagination = "offset"`: the offset\'s query parameter.'
    )
    cursor_param: str = Field(
        "cursor",
        description='`pagination = "cursor"`: the cursor\'s query parameter (e.g. `search_after`).',
    )
    next_path: SourcePathSetting = Field(
        "_links.next.href",
        description='`pagination = "next_link"`: JMESPath of the next page\'s URL in each '
        "answer; OData v4: `'\"@odata.nextLink\"'`.",
    )
    cursor_path: SourcePathSetting | None = Field(
        default=None,
        validate_default=True,
        description='`pagination = "cursor"`, required there: JMESPath of the next cursor '
        "in each answer, e.g. `meta.next_cursor`.",
    )
    # what the API says it holds: stops page/offset walks, and proves a pull complete
    # (``EndProof``); absent: page and offset walks stop at a short page
    total_path: SourcePathSetting | None = Field(
        None,
        description="JMESPath of the number of records in all pages, e.g. `meta.total`: "
        "ends page and offset walks, and a pull that ends short of it fails.",
    )
    total_pages_path: SourcePathSetting | None = Field(
        None, description="JMESPath of the number of pages, e.g. `meta.pages`."
    )
    total_header: HeaderName | None = Field(
        None,
        description="A response header holding the number of records, e.g. `X-WP-Total` "
        "(WooCommerce).",
    )
    total_pages_header: HeaderName | None = Field(
        None, description="A response header holding the number of pages, e.g. `X-WP-TotalPages`."
    )

    # incremental pulls: ?<since_param>=<last pull start - overlap>, or into the body
    since_param: str | None = Field(
        None,
        description="Incremental pulls: the query parameter that asks for what changed "
        "since a time (`updated_since`). Unset: every pull is full.",
    )
    since_body_path: str | None = Field(
        None,
        description='Incremental pulls with `method = "POST"`: the dotted body member the '
        "filter goes into; a list there (Odoo's `domain`) gets it appended.",
    )
    since_template: str | None = Field(
        default=None,
        validate_default=True,
        description="The parameter's value with `{since}` where the time goes, e.g. "
        "Akeneo's search expression. One starting with `?` is several query parameters; "
        "JSON for `since_body_path` is sent as JSON.",
    )
    # one item by key (sync --only, retry, hooks; ``fetch_items``): ".../products/{key}"
    item_url: str | None = Field(
        None,
        description="One item by its key, with `{key}` where the key goes "
        "(`.../products/{key}`): `sync --only`, `retry` and hooks then read one "
        "GET per key instead of the whole pull. It must be on `url`'s origin or "
        "in `allowed_origins`; a 404 means the source does not hold the key.",
    )

    @field_validator("body")
    @classmethod
    def _body(cls, value: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        if value is not None and info.data.get("method") != "POST":
            raise ValueError('a body is sent with method = "POST" only')
        return value

    @field_validator("item_url")
    @classmethod
    def _item_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        if value.count("{key}") != 1:
            raise ValueError('must hold "{key}" once, where the product\'s key goes')
        return value

    @field_validator("since_template")
    @classmethod
    def _since_template(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not (
            info.data.get("since_param") or info.data.get("since_body_path")
        ):
            raise ValueError("needs since_param (a query parameter) or since_body_path to fill")
        return _template(value)

    @field_validator("cursor_path")
    @classmethod
    def _cursor_path(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("pagination") == "cursor" and not value:
            raise ValueError(
                'pagination = "cursor" needs cursor_path, the JMESPath of the next '
                'cursor in each response (e.g. "meta.next_cursor")'
            )
        return value

    @model_validator(mode="after")
    def _post_rules(self) -> HttpSourceSettings:
        if self.since_body_path is not None:
            if self.method != "POST":
                raise ValueError('since_body_path fills the body of method = "POST"')
            if self.since_param is not None:
                raise ValueError("give since_param or since_body_path, not both")
            if not all(part.strip() for part in self.since_body_path.split(".")):
                raise ValueError("since_body_path: a dotted path of body members, like domain")
        return self


class GraphqlSourceSettings(ApiSourceSettings):
    """A GraphQL API (Shopify's Admin API): one query, paged by a cursor variable."""

    type: Literal["graphql"] = Field(description="A GraphQL API (Shopify's Admin API).")
    query: str | None = Field(None, description="The GraphQL query; or `query_file`.")
    query_file: Path | None = Field(
        default=None, validate_default=True, description="A file holding the GraphQL query."
    )
    variables: dict[str, JsonValue] = Field(
        default_factory=dict, description="Variables sent with every page."
    )
    items_path: SourcePathSetting = Field(
        description="JMESPath of the records in each answer: `data.products.nodes`, "
        "`data.products.edges[].node`."
    )
    page_info_path: SourcePathSetting | None = Field(
        None,
        description="JMESPath of `{hasNextPage, endCursor}` in each answer. Unset: one page.",
    )
    cursor_variable: str = Field(
        "cursor", description="The variable the next page's cursor goes in (null first)."
    )
    since_variable: str | None = Field(
        None,
        description="Incremental pulls: the variable filled from `since_template` "
        "(Shopify: `query`). Unset: every pull is full.",
    )
    since_template: str | None = Field(
        default=None,
        validate_default=True,
        description="The variable's value with `{since}` where the time goes "
        "(Shopify: `updated_at:>'{since}'`).",
    )

    @model_validator(mode="before")
    @classmethod
    def _query_path(cls, data: Any, info: ValidationInfo) -> Any:
        return _anchor(data, info, ("query_file",))

    @field_validator("query_file")
    @classmethod
    def _one_query(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        query = info.data.get("query")
        if value is not None and query is not None:
            raise ValueError("give query or query_file, not both")
        if value is None and not (query or "").strip():
            raise ValueError("needs query (the GraphQL text) or query_file")
        return value

    @field_validator("since_template")
    @classmethod
    def _since_template(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not info.data.get("since_variable"):
            raise ValueError("needs since_variable, the query variable it fills")
        return _template(value)

    def query_text(self) -> str:
        """The query, read from ``query_file`` when given (``ConfigError`` if unreadable)."""
        if self.query_file is None:
            return self.query or ""
        try:
            return self.query_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problem = f"cannot read '{self.query_file}': {exc}"
            raise ConfigError([f"at 'source.query_file': {problem}"]) from None


class SqlSourceSettings(IncrementalPull):
    """A table or query in a database SQLAlchemy can reach.

    A relative ``sqlite:///catalog.db`` is relative to the config file's folder.
    """

    type: Literal["sql"]
    url: str = Field(
        repr=False,
        description="A SQLAlchemy URL, e.g. `postgresql://user@host/dbname`; a relative "
        "`sqlite:///catalog.db` is relative to the config file's folder. Better "
        "without its password (`password_env` / `password_file`).",
    )
    password_file: Path | None = Field(None, description="A file holding the database password.")
    password_env: str | None = Field(
        None,
        description="The environment variable holding the database password (wins over "
        "`password_file` and `password`).",
    )
    password: SecretStr | None = Field(
        default=None, validate_default=True, description="The database password, inline (avoid)."
    )
    query: str | None = Field(
        None,
        description="A `SELECT` whose rows are the records; one of `table` and `query`. A "
        "query using `:since` is incremental by itself.",
    )
    table: str | None = Field(
        default=None,
        validate_default=True,
        description="A table or view, `name` or `schema.name`; one of `table` and `query`.",
    )
    batch_size: int = Field(1000, ge=1, le=100_000, description="Rows fetched per round trip.")
    # incremental pulls: a table source adds WHERE <updated_column> > :since; a query
    # that uses :since is incremental by itself (a full pull binds the epoch start)
    updated_column: str | None = Field(
        None,
        description="Incremental pulls: the column holding a row's change time. A `table` "
        "gets `WHERE <updated_column> > :since` (bound, never formatted in); a `query` "
        "filters with `:since` itself and returns the column. The next window starts at "
        "the latest change time read, minus the overlap, in the column's own clock.",
    )
    since_format: Literal["iso8601", "epoch"] = Field(
        "iso8601",
        description="What the change-time column holds: a timestamp (`iso8601`) or unix "
        "seconds (`epoch`).",
    )

    @model_validator(mode="before")
    @classmethod
    def _relative_paths(cls, data: Any, info: ValidationInfo) -> Any:
        data = _anchor(data, info, ("password_file",))
        base = _config_dir(info)
        if base is not None and isinstance(data, dict) and isinstance(data.get("url"), str):
            data = {**data, "url": anchor_sqlite_url(data["url"], base)}
        return data

    @field_validator("url")
    @classmethod
    def _looks_like_url(cls, value: str) -> str:
        if "://" not in value:
            raise ValueError(
                "must be a SQLAlchemy URL such as sqlite:///catalog.db or "
                "postgresql://user@host/dbname"
            )
        return value

    @field_validator("password")
    @classmethod
    def _password(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        _one_secret(value, info, "password", needed=False, why="")
        return value

    @field_validator("updated_column")
    @classmethod
    def _updated_column(cls, value: str | None, info: ValidationInfo) -> str | None:
        query = info.data.get("query")
        if value is not None and query is not None and ":since" not in query:
            raise ValueError(
                "a query source filters with :since itself: add WHERE <column> > :since "
                "to the query, which returns this column"
            )
        return value

    @field_validator("table")
    @classmethod
    def _table_or_query(cls, value: str | None, info: ValidationInfo) -> str | None:
        has_query = bool((info.data.get("query") or "").strip())
        if value is not None and not value.strip():
            raise ValueError("must not be empty")
        if value and has_query:
            raise ValueError("give either table or query, not both")
        if not value and not has_query:
            raise ValueError("give table (a table or view name) or query (a SELECT)")
        return value


def check_since_format(value: str) -> str:
    """``iso8601``, ``epoch`` or a strftime pattern (``%Y-%m-%d %H:%M:%S`` for Akeneo)."""
    if value not in ("iso8601", "epoch") and "%" not in value:
        raise ValueError(
            'must be "iso8601", "epoch" or a strftime pattern like "%Y-%m-%d %H:%M:%S"'
        )
    return value


def anchor_sqlite_url(url: str, base: Path) -> str:
    """``sqlite:///rel.db`` -> ``sqlite:////<base>/rel.db``; other URLs unchanged."""
    scheme, sep, rest = url.partition(":///")
    if not sep or scheme.split("+", 1)[0] != "sqlite":
        return url
    path, q, query = rest.partition("?")
    if not path or path == ":memory:" or path.startswith(("/", "file:")):
        return url
    if Path(path).expanduser().is_absolute():  # "~/x.db"
        return f"{scheme}:///{Path(path).expanduser()}{q}{query}"
    return f"{scheme}:///{(base / path).resolve()}{q}{query}"


# --- file sources: a local path, or a remote file (http(s):// or sftp://) ----------------

_FILE_KEYS = (
    "ca_bundle",
    "sftp_known_hosts",
    "sftp_key_file",
    "sftp_password_file",
    "ready_file",
)
_HTTP_ONLY = ("headers",)
_SFTP_ONLY = ("sftp_known_hosts", "sftp_key_file", "sftp_password_file", "sftp_password_env")


def _file_or_url(value: Any) -> Path | str:
    """A URL stays text (``Path`` would fold its ``//``); anything else is a path."""
    if isinstance(value, Path):
        return value
    if not isinstance(value, str):
        raise ValueError("must be a path or a URL (a string)")
    scheme = url_scheme(value)  # the one rule of what is a URL
    if scheme is None:
        return Path(value)
    if scheme not in REMOTE_SCHEMES:
        raise ValueError(
            f"a remote file must be an https://, http:// or sftp:// URL, not {scheme}://"
            + (" (give a local file as a plain path)" if scheme == "file" else "")
        )
    return value


class FileSourceSettings(SourceCommon):
    """What every file source shares: ``path`` is a local file or a remote file's URL.

    A remote file is downloaded whole to a private temporary file before the
    first record is read, so a download cut short fails the pull before anything
    is planned. Secrets (header values, SFTP password) are resolved when the
    source opens and never echoed.
    """

    path: Annotated[Path | str, PlainValidator(_file_or_url)] = Field(
        description="The export: a local file (relative to the config file's folder), or an "
        "`https://` (`http://`) or `sftp://user@host:port/path` URL downloaded "
        "whole before the first record is read. gzip and a zip holding one file "
        "are read transparently. `SKUFERRY_SOURCE_PATH` overrides it."
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        repr=False,
        description="`https://` paths: HTTP headers sent with the download, only to the "
        "URL's origin (values may be secrets).",
    )
    timeout_s: float = Field(
        60.0,
        gt=0,
        description="Remote paths: seconds per network operation, not for the whole download.",
    )
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="`https://` paths: more origins a redirect may go to (never https to http).",
    )
    allow_insecure_http: bool = Field(
        False, description="Allow an `http://` path to a host that is not a loopback literal."
    )
    ca_bundle: Path | None = Field(
        None, description="`https://` paths: a PEM file of CA certificates for a private CA."
    )
    sftp_known_hosts: Path | None = Field(
        None,
        description="`sftp://` paths, required: an OpenSSH known_hosts file holding the "
        "server's host key (an unknown or changed key is refused).",
    )
    sftp_key_file: Path | None = Field(
        None,
        description="`sftp://` paths: the private key to log in with (mode 0600). Only the "
        "key and password named here are tried (no agent, no `~/.ssh`).",
    )
    sftp_password_file: Path | None = Field(
        None, description="`sftp://` paths: a file holding the password."
    )
    sftp_password_env: str | None = Field(
        None,
        description="`sftp://` paths: the environment variable holding the password (wins "
        "over `sftp_password_file`).",
    )
    # a trigger file the exporter writes once the export is whole: a file still being
    # written is never read
    ready_file: Path | None = Field(
        None,
        description="A file the exporter writes once the export is complete (say "
        "`catalog.csv.done`; relative to the config file's folder). A run waits for it "
        "(at most `ready_timeout_s`) before reading the export; one older than the export "
        "does not count. If it does not come, the run reads nothing and exits 75. Local "
        "paths only.",
    )
    ready_timeout_s: float = Field(
        300.0,
        ge=0,
        description="How long a run waits for `ready_file` before it gives up (exit 75, "
        "nothing read); the daemon's watch starts a run again when the file comes.",
    )

    @model_validator(mode="before")
    @classmethod
    def _relative_files(cls, data: Any, info: ValidationInfo) -> Any:
        return _anchor(data, info, _FILE_KEYS)

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                origin(entry)
            except ValueError as exc:
                raise ValueError(f"{entry!r}: {exc}") from None
        return value

    @model_validator(mode="after")
    def _remote_rules(self) -> FileSourceSettings:
        scheme = remote_scheme(self.path) or ""
        given = self.model_fields_set
        wrong = [k for k in _HTTP_ONLY if k in given and scheme not in ("http", "https")]
        wrong += [k for k in _SFTP_ONLY if k in given and scheme != "sftp"]
        if wrong:
            kind = "an http(s):// path" if wrong[0] in _HTTP_ONLY else "an sftp:// path"
            raise ValueError(f"{', '.join(wrong)} only applies to {kind}")
        if scheme in ("http", "https"):
            if urlsplit(str(self.path)).password is not None:
                raise ValueError(
                    "path: put no password in the URL (it would be logged); send credentials "
                    'in headers, e.g. headers = { Authorization = "Bearer ..." }'
                )
            problem = insecure_http_problem(
                str(self.path), allow_insecure_http=self.allow_insecure_http
            )
            if problem:
                raise ValueError(f"path: {problem}")
        if scheme == "sftp":
            _check_sftp(self)
        if scheme and self.ready_file is not None:
            raise ValueError("ready_file only applies to a local path")
        return self

    def remote_scheme(self) -> str | None:
        """``https``/``http``/``sftp`` for a remote file, None for a local one."""
        return remote_scheme(self.path)


def _check_sftp(s: FileSourceSettings) -> None:
    parts = urlsplit(str(s.path))
    if not parts.username or not parts.hostname or parts.path in ("", "/"):
        raise ValueError("path: an SFTP file is sftp://user@host[:port]/path/to/file")
    if parts.password is not None:
        raise ValueError(
            "path: put no password in the sftp:// URL; use sftp_password_file or sftp_password_env"
        )
    if s.sftp_known_hosts is None:
        raise ValueError(
            "sftp:// needs sftp_known_hosts, a file in OpenSSH known_hosts format holding "
            "the server's host key (ssh-keyscan -p PORT HOST > known_hosts, then check it): "
            "a host key is never accepted blindly"
        )
    if s.sftp_password_file is not None and s.sftp_password_env is not None:
        raise ValueError("give only one of sftp_password_file, sftp_password_env")
    if s.sftp_key_file is None and s.sftp_password_file is None and s.sftp_password_env is None:
        raise ValueError("sftp:// needs sftp_key_file, sftp_password_file or sftp_password_env")


class XlsxSourceSettings(FileSourceSettings):
    """An Excel workbook: one sheet, a header row, one product per row below it."""

    type: Literal["xlsx"]
    sheet: str | int = Field(
        1, description='The sheet: its name (`"Artikel"`) or its 1-based position.'
    )
    header_row: int = Field(
        1, ge=1, description="The row holding the column names; the records are the rows below it."
    )
    # auto (default): calamine (Rust, ~7x faster, holds the sheet in memory) while the
    # sheet's XML is small enough for that to stay bounded, else openpyxl (streamed)
    reader: Literal["auto", "calamine", "openpyxl"] = Field(
        "auto",
        description="`auto` reads with calamine (python-calamine, Rust: about a seventh of "
        "openpyxl's time, but it holds the sheet in memory) when the sheet's XML and "
        "shared strings are at most 80 MB uncompressed (about 230,000 rows of 6 "
        "columns; peak memory under 200 MB), else with openpyxl; `calamine` always "
        "uses calamine; `openpyxl` always streams row by row (memory flat in the row "
        "count; it holds the shared strings). "
        "A sheet calamine cannot read exactly (an error cell, a whole number written "
        "`52.0`) is read by openpyxl either way.",
    )

    @field_validator("sheet")
    @classmethod
    def _sheet(cls, value: str | int) -> str | int:
        if isinstance(value, int) and value < 1:
            raise ValueError("a sheet position counts from 1")
        if isinstance(value, str) and not value.strip():
            raise ValueError("must not be empty")
        return value


class XmlSourceSettings(FileSourceSettings):
    """An XML file (BMEcat and the like) whose ``record`` element repeats once per product."""

    type: Literal["xml"]
    record: str = Field(
        description="The local name of the element that repeats once per product, e.g. "
        '`"ARTICLE"` (namespaces are ignored).'
    )

    @field_validator("record")
    @classmethod
    def _local_name(cls, value: str) -> str:
        if not value.strip() or any(c in value for c in ":{}/ "):
            raise ValueError(
                'must be the local name of the repeating element, like "ARTICLE" '
                "(no prefix, namespace or path)"
            )
        return value
