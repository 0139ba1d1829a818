"""The config's shape: one pydantic model per TOML table, strict (unknown keys are errors).

``settings.py`` loads and validates a file into these; everything else reads them.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit, urlunsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    JsonValue,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from skuferry.config.encoding import known_encoding
from skuferry.config.expressions import jmespath_check
from skuferry.config.sources import (  # _Strict: the one base of every table's model
    FileSourceSettings,
    HttpSourceSettings,
    SqlSourceSettings,
    XlsxSourceSettings,
    XmlSourceSettings,
    _anchor,
    _Strict,
)


class ApiSettings(_Strict):
    base_url: str
    api_key: SecretStr | None = None
    api_key_file: Path | None = None
    api_keys_file: Path | None = None  # several keys of one workspace, one a line (config/keys.py)
    api_keys: tuple[SecretStr, ...] = ()  # resolved at load time; see Settings.api_keys()
    timeout_s: float = Field(30.0, gt=0)
    update_method: Literal["patch", "put", "none"] = "patch"
    max_in_flight: int = Field(4, ge=1, le=64)
    max_retries: int = Field(3, ge=0, le=10)
    page_size: int = Field(100, ge=1, le=100)
    # a run that has not talked to the API for this long makes one cheap authenticated read,
    # so a revoked key is noticed while the source does not change (sync/auth_check.py); 0: never
    auth_check_minutes: int = Field(60, ge=0)
    # security (config/security.py): clear text only to loopback unless allowed; a private CA
    allow_insecure_http: bool = False
    ca_bundle: Path | None = None  # PEM file of CA certificates; default: SSL_CERT_FILE, certifi

    @field_validator("base_url")
    @classmethod
    def _origin_only(cls, value: str) -> str:
        """Keep scheme, host and any prefix path; the client adds ``/api/v1/...`` itself."""
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                "must be an http:// or https:// URL with a host, like 'https://cms.example.com'"
            )
        if parts.query or parts.fragment:
            raise ValueError("must not have a query (?...) or fragment (#...)")
        path = parts.path.rstrip("/")
        path = path.removesuffix("/api/v1")
        return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


THOUSANDS_SEPARATORS = (".", ",", "'", " ")


class FieldSpec(_Strict):
    """One target field, read from a ``column``, a JMESPath ``path``, or a constant ``value``."""

    column: str | None = None
    path: str | None = None  # JMESPath on the record: values.name[0].data
    value: JsonValue | None = None  # a constant; sent as written unless `type` is given
    type: Literal["string", "integer", "decimal", "boolean", "json"] = "string"
    required: bool = False
    default: JsonValue | None = None  # when the column or path is empty or finds nothing
    decimal: Literal[".", ","] = "."  # locale numbers: 1.234,50 is decimal "," thousands "."
    thousands: str | None = None  # ".", ",", "'" or " " (a space also matches U+00A0, U+202F)
    create_only: bool = False  # sent when the product is created, then the CMS's (sync/fields.py)
    # checks on the converted value (sync/checks.py); a failed one rejects the row, held
    check: Literal["gtin"] | None = None  # GTIN-8/12/13/14 with a valid check digit
    pattern: str | None = None  # a regular expression the whole text must match
    min: Decimal | None = None  # numbers (integer, decimal) at least / at most this
    max: Decimal | None = None
    max_length: int | None = Field(None, ge=1)  # characters of text
    one_of: list[JsonValue] | None = None  # the allowed values, after conversion

    @field_validator("pattern")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return value

    @field_validator("path")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            jmespath_check(value)
        return value

    @field_validator("thousands")
    @classmethod
    def _separator(cls, value: str | None) -> str | None:
        if value is not None and value not in THOUSANDS_SEPARATORS:
            raise ValueError("""must be one of ".", ",", "'" or " " (a space)""")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> FieldSpec:
        given = [name for name in ("column", "path", "value") if getattr(self, name) is not None]
        if len(given) != 1:
            found = f" (found {' and '.join(given)})" if given else ""
            raise ValueError(f"set exactly one of column, path or value{found}")
        if self.value is not None and self.default is not None:
            raise ValueError("default has no use beside a constant value")
        if (self.decimal != "." or self.thousands) and self.type not in ("decimal", "integer"):
            raise ValueError("decimal and thousands apply to type 'decimal' or 'integer' only")
        numeric = self.type in ("decimal", "integer")
        if (self.min is not None or self.max is not None) and not numeric:
            raise ValueError("min and max apply to type 'decimal' or 'integer' only")
        if (self.pattern or self.max_length or self.check) and self.type in ("json", "boolean"):
            raise ValueError("check, pattern and max_length apply to text and numbers only")
        # an integer has no decimal mark: thousands = "." alone is fine there
        marked = self.type == "decimal" or "decimal" in self.model_fields_set
        if self.thousands == self.decimal and marked:
            other = "," if self.thousands == "." else "."
            raise ValueError(f'thousands and decimal must differ (set decimal = "{other}")')
        return self


class TableFile(_Strict):
    """A ``[mapping.tables]`` table read from a CSV file: ``key`` column -> ``value`` column."""

    file: Path  # relative to the config file's folder
    key: str
    value: str
    default: JsonValue | None = None  # the label of a code the file lacks (else: rejected)
    delimiter: str = Field(",", min_length=1, max_length=1)
    encoding: Annotated[str, AfterValidator(known_encoding)] = "utf-8-sig"

    @model_validator(mode="before")
    @classmethod
    def _relative_file(cls, data: Any, info: ValidationInfo) -> Any:
        return _anchor(data, info, ("file",))


class MappingSettings(_Strict):
    key: str = "sku"
    fields: dict[str, str | FieldSpec] | None = None
    send_nulls: bool = False  # a field the source dropped is PATCHed to null (else left alone)
    # target fields whose changes jump the queue when writes wait for budget (sync/lanes.py)
    urgent: list[str] = Field(default_factory=list)
    # products in pieces (sync/pieces.py, docs/mapping-pieces.md)
    each: str | None = None  # JMESPath to a list: each element is one record (parent: the record)
    group_by: str | None = None  # column or path: consecutive records sharing it form a group
    inherit: list[str] | None = None  # the columns an empty cell takes from the group's first
    tables: dict[
        str, Annotated[TableFile | dict[str, JsonValue], Field(union_mode="left_to_right")]
    ] = Field(default_factory=dict)

    @field_validator("each")
    @classmethod
    def _paths_compile(cls, value: str | None) -> str | None:
        if value is not None:
            jmespath_check(value)
        return value

    @model_validator(mode="after")
    def _inherit_needs_group(self) -> MappingSettings:
        if self.inherit is not None and self.group_by is None:
            raise ValueError("inherit needs group_by (the column that groups the records)")
        return self

    @model_validator(mode="after")
    def _key_is_owned(self) -> MappingSettings:
        spec = (self.fields or {}).get(self.key)
        if getattr(spec, "create_only", False):
            raise ValueError(f"the key field '{self.key}' cannot be create_only")
        unknown = [f for f in self.urgent if self.fields is not None and f not in self.fields]
        if unknown:
            raise ValueError(
                f"urgent names {', '.join(map(repr, unknown))}, not a field of [mapping.fields]"
            )
        return self

    @property
    def create_only(self) -> frozenset[str]:
        """Target fields sent on create only; after that they belong to the CMS."""
        fields = self.fields or {}
        return frozenset(name for name, spec in fields.items() if getattr(spec, "create_only", 0))


class CsvSourceSettings(FileSourceSettings):  # path: a file or an http(s)/sftp URL
    type: Literal["csv"]
    encoding: Annotated[str, AfterValidator(known_encoding)] = "utf-8"
    delimiter: str = ","


class JsonlSourceSettings(FileSourceSettings):
    type: Literal["jsonl"]
    encoding: Annotated[str, AfterValidator(known_encoding)] = "utf-8"


SourceSettings = Annotated[
    CsvSourceSettings
    | JsonlSourceSettings
    | HttpSourceSettings
    | SqlSourceSettings
    | XlsxSourceSettings
    | XmlSourceSettings,
    Field(discriminator="type"),
]
SOURCE_MODELS: tuple[type[BaseModel], ...] = (
    CsvSourceSettings,
    JsonlSourceSettings,
    HttpSourceSettings,
    SqlSourceSettings,
    XlsxSourceSettings,
    XmlSourceSettings,
)
SOURCE_TYPES: tuple[str, ...] = tuple(
    get_args(model.model_fields["type"].annotation)[0] for model in SOURCE_MODELS
)
FILE_SOURCE_TYPES = (
    "csv",
    "jsonl",
    "xlsx",
    "xml",
)  # the sources with a `path` (SKUFERRY_SOURCE_PATH)


class JoinSettings(_Strict):
    """One ``[[join]]`` table: another source whose records add fields to the primary's.

    Every key besides ``name``, ``key`` and ``on`` is a source setting, as in ``[source]``.
    """

    name: str  # mapping paths read the partner as <name>.<field>
    key: str  # the join's own key: a column of its records, else a JMESPath path
    on: str  # the primary record's column (else path) that matches ``key``
    source: SourceSettings

    @model_validator(mode="before")
    @classmethod
    def _split(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "source" in data:
            return data
        own = {k: v for k, v in data.items() if k in ("name", "key", "on")}
        return {**own, "source": {k: v for k, v in data.items() if k not in own}}

    @field_validator("name")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError("must be a plain name (letters, digits, _), like 'pim'")
        return value

    @field_validator("key", "on")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.strip():  # a column ("Variant SKU", "@id") or a JMESPath path
            raise ValueError("must name a column or a path")
        return value


class BudgetSettings(_Strict):
    read_per_minute: int = Field(300, gt=0)
    write_per_minute: int = Field(60, gt=0)
    egress_per_minute: int | None = Field(None, gt=0)
    limiter: Literal["window", "bucket"] = "window"
    safety_margin: float = Field(0.01, ge=0, lt=0.5)  # bucket: fraction of the rate kept back
    clock_skew_s: float = Field(0.5, ge=0, le=10)  # jitter allowance between us and the server
    # all keys together (issue 12); unset: the spec's 900/180/40, never below one key's limit
    workspace_read_per_minute: int | None = Field(None, gt=0)
    workspace_write_per_minute: int | None = Field(None, gt=0)
    workspace_egress_per_minute: int | None = Field(None, gt=0)


class ScheduleSettings(_Strict):
    interval_minutes: float | None = Field(None, gt=0)
    cron: str | None = None
    run_at_start: bool = True
    jitter_s: int = Field(0, ge=0)
    misfire_grace_s: int = Field(300, gt=0)
    verify_every: int = Field(0, ge=0)  # walk the remote every N runs (0: never)
    watch: bool = False  # `run` also starts a run when a file source's file changes
    watch_settle_s: float = Field(5.0, ge=0)  # ... once its size and mtime stay put this long


class StateSettings(_Strict):
    path: Path


class SafetySettings(_Strict):
    max_change_ratio: float = Field(0.5, gt=0, le=1)
    max_gone_ratio: float = Field(0.1, gt=0, le=1)  # of the known products archived in one run


class GoneSettings(_Strict):
    """What happens on the remote to a product that leaves the source (sync/gone.py)."""

    action: Literal["leave", "patch"] = "leave"
    patch: dict[str, JsonValue] = Field(default_factory=dict)  # sent once, e.g. status = "archived"
    restore: dict[str, JsonValue] = Field(default_factory=dict)  # sent when it comes back

    @model_validator(mode="after")
    def _patch_given(self) -> GoneSettings:
        if self.action == "patch" and not self.patch:
            raise ValueError(
                'action = "patch" needs a patch table, like patch = { status = "archived" }'
            )
        return self


# Prometheus' label names: a letter or underscore, then letters, digits and underscores;
# names starting with "__" are reserved for Prometheus itself.
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# Labels skuferry's own metrics already carry: a constant label of the same name would clash.
METRIC_LABELS = frozenset({"result", "state", "tier", "key"})


class MetricsSettings(_Strict):
    textfile: Path | None = None
    # Constant labels on every sample, in the textfile and on /metrics: a fleet of daemons
    # told apart by workspace, e.g. labels = { workspace = "acme" } (docs/kubernetes.md).
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("labels")
    @classmethod
    def _label_names(cls, labels: dict[str, str]) -> dict[str, str]:
        problems = []  # every bad name at once
        for name in labels:
            if not _LABEL_NAME.fullmatch(name):
                problems.append(
                    f"{name!r} is not a Prometheus label name (a letter or _, then letters, "
                    "digits and _), e.g. workspace"
                )
            elif name.startswith("__"):
                problems.append(f"{name!r}: label names starting with __ are Prometheus' own")
            elif name in METRIC_LABELS:
                problems.append(
                    f"{name!r} is a label skuferry's metrics already use "
                    f"({', '.join(sorted(METRIC_LABELS))}); pick another name"
                )
        if problems:
            raise ValueError("; ".join(problems))
        return labels


class DaemonSettings(_Strict):
    listen: str | None = None  # "127.0.0.1:9347": /metrics and /healthz over HTTP
    # POST /hooks/sync and /hooks/run on `listen` (service/hooks_http.py): the shared secret
    # that signs their bodies; without one the hook routes answer 404
    hook_secret_file: Path | None = None
    hook_secret_env: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _relative_paths(cls, data: Any, info: ValidationInfo) -> Any:
        return _anchor(data, info, ("hook_secret_file",))

    @model_validator(mode="after")
    def _one_hook_secret(self) -> DaemonSettings:
        if self.hook_secret_file is not None and self.hook_secret_env is not None:
            raise ValueError("set one of hook_secret_file and hook_secret_env, not both")
        return self

    @property
    def hooks(self) -> bool:
        return self.hook_secret_file is not None or self.hook_secret_env is not None

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is not None:
            host, sep, port = value.rpartition(":")
            if not sep or not host or not port.isdigit() or int(port) > 65535:
                raise ValueError('must be "host:port", like "127.0.0.1:9347"')
        return value


class MonitorSettings(_Strict):
    start_url: str | None = None
    success_url: str | None = None
    failure_url: str | None = None
    timeout_s: float = Field(10.0, gt=0)


class Settings(_Strict):
    api: ApiSettings
    source: SourceSettings
    mapping: MappingSettings = MappingSettings()
    budget: BudgetSettings = BudgetSettings()
    schedule: ScheduleSettings = ScheduleSettings()
    state: StateSettings
    safety: SafetySettings = SafetySettings()
    gone: GoneSettings = GoneSettings()
    metrics: MetricsSettings = MetricsSettings()
    monitor: MonitorSettings = MonitorSettings()
    daemon: DaemonSettings = DaemonSettings()
    join: list[JoinSettings] = Field(default_factory=list)
    config_path: Path | None = None  # the file these came from, for messages

    def api_key(self) -> SecretStr:
        """The API key, resolved at load time.

        Order: ``SKUFERRY_API_KEY`` > ``[api] api_key`` > ``[api] api_key_file``
        > ``$CREDENTIALS_DIRECTORY/api_key``.
        """
        if self.api.api_key is None:  # pragma: no cover - load_settings guarantees it
            raise RuntimeError("api key not resolved")
        return self.api.api_key

    @property
    def api_keys(self) -> list[SecretStr]:
        """Every API key of the workspace (one, usually); see ``config/keys.py`` for the order."""
        return list(self.api.api_keys) or [self.api_key()]

    def redacted(self) -> dict[str, Any]:
        """The effective config as plain data, secrets shown as ``***`` (for ``skuferry check``)."""
        return {name: _plain(value, key=name) for name, value in self.model_dump().items()}


_SECRET_HEADER = re.compile(r"auth|token|key|secret|cookie|password", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(://[^/@:]*:)[^/@]*@")


def _plain(value: Any, *, key: str) -> Any:
    """``model_dump`` output made JSON-ready, with every secret replaced by ``***``."""
    if isinstance(value, SecretStr):
        return "***"
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        if key == "headers":
            return {
                name: "***" if _SECRET_HEADER.search(str(name)) else _plain(item, key=name)
                for name, item in value.items()
            }
        return {name: _plain(item, key=str(name)) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item, key=key) for item in value]
    if isinstance(value, str) and key.endswith("url"):
        return _URL_PASSWORD.sub(r"\1***@", value)
    return value
