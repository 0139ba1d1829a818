"""The config's shape: one pydantic model per TOML table, strict (unknown keys are errors).

The config loader validates a file into these; everything else reads them, through
``skuferry.config.schema``. The ``[source]`` types are modelled beside these tables.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit, urlunsplit

from pydantic import (
    AfterValidator,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    JsonValue,
    PrivateAttr,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticKnownError, core_schema
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from skuferry.config import presets
from skuferry.config.encoding import known_encoding, text_encoding
from skuferry.config.expressions import jmespath_check
from skuferry.config.masking import masked
from skuferry.config.schema import reading
from skuferry.config.schema.base import Strict
from skuferry.config.schema.sources import (
    FileSourceSettings,
    GraphqlSourceSettings,
    HttpSourceSettings,
    SourceCommon,
    SqlSourceSettings,
    XlsxSourceSettings,
    XmlSourceSettings,
    _anchor,
)
from skuferry.models import METRIC_LABELS


class ApiSettings(Strict):
    """The CMS workspace skuferry writes to, and how it talks to it."""

    base_url: str = Field(
        description="The CMS workspace, scheme and host only (any prefix path is kept): "
        "skuferry adds `/api/v1/...` itself; a trailing `/api/v1` is accepted "
        "and dropped."
    )
    api_key: SecretStr | None = Field(
        None,
        description="The API key, inline. Avoid: the key then sits in the config file. "
        "`SKUFERRY_API_KEY`, `api_key_file` and "
        "`$CREDENTIALS_DIRECTORY/api_key` come first, in that order.",
    )
    api_key_file: Path | None = Field(
        None,
        description="A file holding only the API key (a trailing newline is fine), mode "
        "0600; a file every user may read is refused.",
    )
    api_keys_file: Path | None = Field(
        None,
        description="Several keys of one workspace, one per line (blank lines and `#` "
        "comments ignored); requests are spread over them inside the workspace "
        "budget. `SKUFERRY_API_KEYS` wins over it.",
    )
    api_keys: tuple[SecretStr, ...] = Field(
        (),
        description="Several keys of one workspace, inline. Avoid: the keys then sit in the "
        "config file.",
    )
    timeout_s: float = Field(30.0, gt=0, description="Seconds to wait for one response.")
    update_method: Literal["patch", "put", "none"] = Field(
        "patch",
        description="How changed products are sent: `PATCH` or `PUT /api/v1/products/:id` "
        "(a PUT first reads the product to keep the fields skuferry does not "
        "own), or `none` (changes are reported as drift).",
    )
    max_in_flight: int = Field(
        4,
        ge=1,
        le=64,
        description="Concurrent writes of the run (the write pool; reads stay sequential); "
        "the rate budget, not this, sets the pace. While every one of them waits for the "
        "budget, the urgent lane may send up to 4 more on spare workers, so at most "
        "`max_in_flight` + 4 requests are ever on the wire at once.",
    )
    max_retries: int = Field(
        3,
        ge=0,
        le=10,
        description="Retries of a request that failed transiently (429s are waited out, not "
        "counted here).",
    )
    page_size: int = Field(
        100, ge=1, le=100, description="Products per page when walking `GET /api/v1/products`."
    )
    # a create whose answer was lost is settled by a walk only once the list could show it
    # (the writer's ``Doubts``): the list's lag is learnt from the run's own creates, this bounds it
    list_lag_s: float = Field(
        10.0,
        ge=0,
        le=3600,
        description="The longest the CMS's product list may lag behind its writes (a search "
        "index, a read replica), in seconds. A create whose answer was lost is sent again only "
        "once a walk could show it: when a later create of the run is on the list, else once "
        "this long has passed; a list seen lagging longer keeps it in doubt for the next run. "
        "`0`: the list shows every write at once (no wait).",
    )
    # a run that has not talked to the API for this long makes one cheap authenticated read,
    # so a revoked key is noticed while the source does not change; 0: never
    auth_check_minutes: int = Field(
        60,
        ge=0,
        description="A run that sent nothing makes one cheap authenticated read if the API "
        "was not contacted for this long, so a revoked key is noticed while the "
        "source does not change; `0`: never.",
    )
    # the config's security rules: clear text only to loopback unless allowed; a private CA
    allow_insecure_http: bool = Field(
        False,
        description="Allow an `http://` `base_url` to a host that is not a loopback literal "
        "(the key would cross the network in clear text). Only on a network you "
        "trust.",
    )
    ca_bundle: Path | None = Field(
        None,
        description="A PEM file of CA certificates, for a CMS behind a private CA. Default: "
        "`SSL_CERT_FILE` (or `SSL_CERT_DIR`) when set, else the certifi bundle. "
        "TLS is always verified.",
    )

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


class FieldSpec(Strict):
    """One target field, read from a ``column``, a JMESPath ``path``, or a constant ``value``."""

    column: str | None = Field(
        None,
        description="A top-level column of the record. Set exactly one of `column`, `path` "
        "and `value`.",
    )
    path: str | None = Field(
        None,
        description="A JMESPath expression on the record, for nested records "
        "(`values.name[0].data`); a column whose name has spaces is `'\"Variant "
        "SKU\"'`. A path that finds nothing is empty.",
    )
    value: JsonValue | None = Field(
        None,
        description="A constant, sent as written (text, number, boolean, table or array); "
        "with a `type`, converted once.",
    )
    type: Literal["string", "integer", "decimal", "boolean", "json"] = Field(
        "string",
        description="What the value is sent as. `decimal` keeps exactly the source's digits "
        "(`19.90` stays `19.90`); `json` sends a structure as it is.",
    )
    required: bool = Field(False, description="Reject a row whose value is empty or missing.")
    default: JsonValue | None = Field(
        None,
        description="Used when the column is empty or missing, or the path finds nothing; "
        "converted by the field's `type`.",
    )
    decimal: Literal[".", ","] = Field(
        ".",
        description="The decimal mark of locale numbers, on `decimal` and `integer` fields: "
        '`1.234,50` is `decimal = ","` with `thousands = "."`.',
    )
    thousands: str | None = Field(
        None,
        description='The thousands separator of locale numbers: `"."`, `","`, `"\'"` or `" '
        '"` (a space also matches the no-break spaces French exports write). '
        "Groups must be of three digits.",
    )
    create_only: bool = Field(
        False,
        description="Sent when the product is created, never again: the CMS owns it after "
        "that, so staff edits stay. Not for the key field.",
    )
    # checks on the converted value (the mapper's ``checks_of``); a failed one rejects the row, held
    check: Literal["gtin"] | None = Field(
        None,
        description="`gtin`: the value must be a GTIN-8, 12, 13 or 14 with a valid check "
        "digit. A failed check rejects the row and holds the product (neither "
        "updated nor archived).",
    )
    pattern: str | None = Field(
        None,
        description="A regular expression the whole value (text or number) must match; "
        "checked after conversion, on values that are not empty.",
    )
    min: Decimal | None = Field(
        None, description="`integer` and `decimal` fields: the smallest number allowed."
    )
    max: Decimal | None = Field(
        None, description="`integer` and `decimal` fields: the largest number allowed."
    )
    max_length: int | None = Field(
        None, ge=1, description="The most characters a text (or number) value may have."
    )
    one_of: list[JsonValue] | None = Field(
        None, description="The values allowed, compared after conversion."
    )

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


class TableFile(Strict):
    """A ``[mapping.tables]`` table read from a CSV file: ``key`` column -> ``value`` column."""

    file: Path = Field(
        description="A CSV file holding the table, relative to the config file's folder."
    )
    key: str = Field(
        description="The column holding the codes (compared as text, blanks around them "
        "removed; the first row of a code wins)."
    )
    value: str = Field(description="The column holding the labels.")
    default: JsonValue | None = Field(
        None,
        description="The label of a code the file lacks; unset: such a row is rejected, "
        "naming the table and the code.",
    )
    delimiter: str = Field(
        ",", min_length=1, max_length=1, description="The file's delimiter, exactly one character."
    )
    encoding: Annotated[str, AfterValidator(known_encoding)] = Field(
        "utf-8-sig", description="The file's encoding (the default skips a BOM)."
    )

    @model_validator(mode="before")
    @classmethod
    def _relative_file(cls, data: Any, info: ValidationInfo) -> Any:
        return _anchor(data, info, ("file",))


class MappingSettings(Strict):
    """How a source record becomes the product sent to the CMS."""

    key: str = Field(
        "sku", description="The field that identifies a product on both sides (the natural key)."
    )
    fields: dict[str, str | FieldSpec] | None = Field(
        None,
        description="Target field = source column (text), or a table of the keys below. "
        "Omitted: the source columns are sent unchanged. When given, it must "
        "map the `key` field.",
    )
    send_nulls: bool = Field(
        False,
        description="A field the source no longer gives is updated to `null` on the remote "
        "(once); by default it is left alone.",
    )
    # target fields whose changes jump the queue when writes wait for budget (the writer's lanes)
    urgent: list[str] = Field(
        default_factory=list,
        description="Target fields of `[mapping.fields]` whose changes jump the queue when "
        "writes wait for budget: updates changing one go first, then creates, "
        "then the rest.",
    )
    # products in pieces (the reader's ``Pieces``; the user guide's page on pieces)
    each: str | None = Field(
        None,
        description="JMESPath to a list in each record: every element becomes its own "
        "record, with the record as `parent` (nested variants).",
    )
    group_by: str | None = Field(
        None,
        description="A column or path: consecutive records sharing its value form a group, "
        "and later records take empty cells from the group's first "
        "(continuation rows).",
    )
    inherit: list[str] | None = Field(
        None,
        description="With `group_by`: only these columns are taken from the group's first "
        "record; omitted: every column.",
    )
    tables: dict[
        str, Annotated[TableFile | dict[str, JsonValue], Field(union_mode="left_to_right")]
    ] = Field(
        default_factory=dict,
        description="Tables that turn codes into labels for `lookup('name', code)` in "
        'paths: inline (`{ "1" = "Red" }`) or read from a CSV file (`{ file, '
        "key, value }`).",
    )

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


FinalNewline = Literal["required", "optional"]
# "error": a row with fewer fields than the header is unreadable (held); "pad": the
# exporter drops trailing empty fields, and the missing ones are read as empty.
ShortRows = Literal["error", "pad"]


def _final_newline() -> Any:
    return Field(
        "required",
        description="`required` (default): a file whose last line has no line break is "
        "taken for a torn export (cut short, or still being written) and the run stops "
        "(exit 3, nothing written); `optional`: the exporter never writes a final line "
        "break, and the last line is read as a whole record.",
    )


class CsvSourceSettings(FileSourceSettings):  # path: a file or an http(s)/sftp URL
    """A CSV file whose first row is the header."""

    type: Literal["csv"]
    encoding: Annotated[str, AfterValidator(text_encoding)] = Field(
        "auto",
        description="`auto` (default): the file's bytes decide, a byte-order mark first, "
        "then UTF-8 when its non-ASCII lines are valid UTF-8, else `cp1252`; or any codec "
        "Python knows, e.g. `cp1252` for Windows exports (a BOM is skipped). A file read in "
        "a single-byte encoding whose non-ASCII lines are all valid UTF-8 is refused, "
        "naming the line: its names would reach the CMS as mojibake (`Ã¼` for `ü`).",
    )
    delimiter: str = Field(",", description='Exactly one character, e.g. `";"` or `"\\t"`.')
    final_newline: FinalNewline = _final_newline()
    short_rows: ShortRows = Field(
        "error",
        description="A row with fewer fields than the header: `error` (default) rejects it "
        "and holds its product, as a row with too many fields; `pad`, for an exporter that "
        "drops trailing empty fields, reads the missing fields as empty.",
    )


class JsonlSourceSettings(FileSourceSettings):
    """JSON Lines: one product object per line."""

    type: Literal["jsonl"]
    encoding: Annotated[str, AfterValidator(known_encoding)] = Field(
        "utf-8", description="Any codec Python knows."
    )
    final_newline: FinalNewline = _final_newline()


SOURCE_MODELS: tuple[type[SourceCommon], ...] = (
    CsvSourceSettings,
    JsonlSourceSettings,
    HttpSourceSettings,
    GraphqlSourceSettings,
    SqlSourceSettings,
    XlsxSourceSettings,
    XmlSourceSettings,
)
SOURCE_TYPES: tuple[str, ...] = tuple(
    get_args(model.model_fields["type"].annotation)[0] for model in SOURCE_MODELS
)
_MODEL_OF: dict[str, type[SourceCommon]] = dict(zip(SOURCE_TYPES, SOURCE_MODELS, strict=True))
_EXPECTED_TAGS = ", ".join(f"'{tag}'" for tag in SOURCE_TYPES)


def _source_by_type(value: Any, info: ValidationInfo) -> SourceCommon:
    """A ``[source]`` (or ``[[join]]``) table validated by the model its ``type`` names.

    What ``Field(discriminator="type")`` over the union did, with the same error types
    and the same locations below the table (without pydantic's branch marker, which the
    loader dropped anyway), but only the model in use is built: the source models are
    built at their first use (``defer_build``), so a start pays for one source type
    instead of seven.
    """
    if isinstance(value, dict):
        if "type" not in value:
            raise PydanticKnownError("union_tag_not_found", {"discriminator": "'type'"})
        tag = value["type"]
    elif isinstance(value, SourceCommon):
        tag = getattr(value, "type", None)
    else:
        raise PydanticKnownError("model_attributes_type")
    model = _MODEL_OF.get(tag) if isinstance(tag, str) else None
    if model is None:
        raise PydanticKnownError(
            "union_tag_invalid",
            {"discriminator": "'type'", "tag": str(tag), "expected_tags": _EXPECTED_TAGS},
        )
    return model.model_validate(value, context=info.context)


class _ByType:
    """The core schema of ``SourceSettings``: ``_source_by_type``, no union built."""

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source_type: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        del source_type, handler  # handler(source_type) would build every member
        return core_schema.with_info_plain_validator_function(_source_by_type)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The JSON schema of the discriminated union (every source model gets built)."""
        del schema
        union = core_schema.tagged_union_schema(
            {tag: model.__pydantic_core_schema__ for tag, model in _MODEL_OF.items()},
            discriminator="type",
        )
        return handler(union)


SourceSettings = Annotated[
    CsvSourceSettings
    | JsonlSourceSettings
    | HttpSourceSettings
    | GraphqlSourceSettings
    | SqlSourceSettings
    | XlsxSourceSettings
    | XmlSourceSettings,
    _ByType,
]
FILE_SOURCE_TYPES = (
    "csv",
    "jsonl",
    "xlsx",
    "xml",
)  # the sources with a `path` (SKUFERRY_SOURCE_PATH)


class JoinSettings(Strict):
    """One ``[[join]]`` table: another source whose records add fields to the primary's.

    Every key besides ``name``, ``key`` and ``on`` is a source setting, as in ``[source]``.
    """

    name: str = Field(
        description="The name under which mapping paths read the partner record, as "
        "`<name>.<field>`."
    )
    key: str = Field(
        description="The join's own key: a column of its records, else a JMESPath path."
    )
    on: str = Field(
        description="The primary record's column (else path) whose value must equal `key`."
    )
    source: SourceSettings = Field(
        description="Not written as a table: every other key of the `[[join]]` table is a "
        "source setting, exactly as in `[source]` (`type`, `path`, `url`, ...)."
    )

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


class BudgetSettings(Strict):
    """The API's rate budgets: what skuferry may spend per minute, per tier."""

    read_per_minute: int = Field(
        300, gt=0, description="Read requests (GET) each API key may send per minute."
    )
    write_per_minute: int = Field(
        60, gt=0, description="Write requests (POST, PUT, PATCH) each API key may send per minute."
    )
    egress_per_minute: int | None = Field(
        None,
        gt=0,
        description="The API's egress tier per key; when set, every request is also charged "
        "to it. Unset: not counted.",
    )
    limiter: Literal["window", "bucket"] = Field(
        "window",
        description="`window`: at most N requests per tier in any 60 s + `clock_skew_s`, "
        "safe however the server counts (all N are used). `bucket`: a token "
        "bucket, faster at the start of a big sync.",
    )
    safety_margin: float = Field(
        0.01, ge=0, lt=0.5, description="`bucket` only: the fraction of the refill rate kept back."
    )
    clock_skew_s: float = Field(
        0.5,
        ge=0,
        le=10,
        description="Seconds allowed between skuferry's clock and the server's counting window.",
    )
    urgent_share: float = Field(
        0.1,
        ge=0,
        le=0.5,
        description="The share of each window (`bucket`: half of it, standing in the bucket) "
        "that a backlog leaves for urgent writes (hooks, a watched export, `sync --only`), "
        "so they go within seconds while a long run drains. Kept by a daemon that hears hooks "
        "or watches its export, and by any run for a window after an urgent write; a run "
        "that cannot hear one keeps none, and a backlog filling its last window exactly "
        "needs no extra window. `bucket` starts a big sync that many tokens later. 0: none "
        "kept.",
    )
    # all keys together (issue 12); unset: the spec's 900/180/40, never below one key's limit
    workspace_read_per_minute: int | None = Field(
        None,
        gt=0,
        description="Reads of all keys of the workspace together, with several keys. Unset: "
        "the spec's 900, never below one key's own limit.",
    )
    workspace_write_per_minute: int | None = Field(
        None,
        gt=0,
        description="Writes of all keys of the workspace together, with several keys. "
        "Unset: the spec's 180, never below one key's own limit.",
    )
    workspace_egress_per_minute: int | None = Field(
        None,
        gt=0,
        description="Egress of all keys of the workspace together, with several keys. "
        "Unset: the spec's 40, never below one key's own limit.",
    )


class ScheduleSettings(Strict):
    """When `skuferry run` (the daemon) syncs. Set `interval_minutes` or `cron`, not both."""

    interval_minutes: float | None = Field(
        None,
        gt=0,
        description="Run every this many minutes. Neither this nor `cron` set: every 15 minutes.",
    )
    cron: str | None = Field(
        None,
        description="A 5-field crontab expression (minute hour day month weekday; `7` is "
        "Sunday, as in crontab), instead of `interval_minutes`.",
    )
    run_at_start: bool = Field(True, description="Also sync once right when the daemon starts.")
    jitter_s: int = Field(
        0, ge=0, description="A random delay of up to this many seconds before each run."
    )
    misfire_grace_s: int = Field(
        300,
        gt=0,
        description="A run late by more than this many seconds (host asleep, clock jump) is "
        "skipped and logged (`daemon.run.missed`).",
    )
    verify_every: int = Field(
        0,
        ge=0,
        description="Every N runs, walk the whole remote to find products deleted or edited "
        "there and put them right (as `sync --verify`); `0`: never.",
    )
    watch: bool = Field(
        False,
        description="Also start a run when the file of `[source] path`, or a local file "
        "of a `[[join]]`, changes (a new export).",
    )
    watch_settle_s: float = Field(
        5.0,
        ge=0,
        description="With `watch`: start the run once the watched files' sizes and mtimes "
        "have not moved for this many seconds.",
    )


class StateSettings(Strict):
    """The local SQLite mirror: what was sent, remote ids, open write intents, runs and the
    shared budgets.
    """

    path: Path = Field(
        description="The SQLite state file (its `-wal`, `-shm` and `.lock` siblings sit "
        "beside it). `SKUFERRY_STATE_PATH` overrides it.",
        json_schema_extra={
            "default_text": "`$STATE_DIRECTORY/skuferry.db` under systemd "
            "(`StateDirectory=`), else `skuferry.db` beside the "
            "config file"
        },
    )
    history_days: int = Field(
        30,
        ge=0,
        description="How long each product's history of writes is kept (what `skuferry "
        "explain` tells and `skuferry undo` takes back), in days; older runs are pruned "
        "whole after each run. `0` keeps no history (and nothing can be undone).",
    )
    history_max_rows: int = Field(
        1_000_000,
        ge=1000,
        description="At most this many history rows are kept (one per write): beyond it the "
        "oldest runs are pruned whole, even inside `history_days`. The newest run is always "
        "kept whole.",
    )


class SafetySettings(Strict):
    """Guards that stop a run before it writes, when the source looks wrong."""

    max_change_ratio: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Refuse a run that would update more than this fraction of the products "
        "already synced (and more than 10): exit 2, nothing written; `sync "
        "--force` overrides. `1` disables it.",
    )
    max_gone_ratio: float = Field(
        0.1,
        gt=0,
        le=1,
        description="Refuse a run that would archive more than this fraction of the known "
        'products (`[gone] action = "patch"`; a truncated export looks like '
        "mass discontinuation). Runs archiving 10 or fewer never trip it; `sync "
        "--force` overrides.",
    )


class GoneSettings(Strict):
    """What happens on the remote to a product that leaves the source."""

    action: Literal["leave", "patch"] = Field(
        "leave",
        description="`leave`: a product that leaves the source is only marked gone locally. "
        "`patch`: it gets one update carrying `patch`, once, and is listed as "
        "archived.",
    )
    patch: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="The fields sent once to a product that left the source, e.g. `{ status "
        '= "archived", stock = 0 }`. Needed by `action = "patch"`.',
    )
    restore: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="The fields sent, with its source data, to an archived product that "
        'comes back, e.g. `{ status = "active" }`.',
    )

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


class MetricsSettings(Strict):
    """Prometheus metrics written to a file after each run, for node_exporter's textfile
    collector.
    """

    textfile: Path | None = Field(
        None,
        description="Write Prometheus metrics to this file after every run (atomically; "
        "counters carry across runs). Unset: no metrics file.",
    )
    # Constant labels on every sample, in the textfile and on /metrics: a fleet of daemons
    # told apart by workspace, e.g. labels = { workspace = "acme" } (the Kubernetes guide).
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Constant labels on every sample, in the textfile and on `/metrics`, "
        'e.g. `{ workspace = "acme" }` to tell a fleet of daemons apart.',
    )

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


class DaemonSettings(Strict):
    """What the daemon (`skuferry run`) serves besides its schedule."""

    listen: str | None = Field(
        None,
        description='`"host:port"` on which the daemon serves `/metrics` and `/healthz`, '
        'e.g. `"127.0.0.1:9347"`. Keep it on loopback; changing it needs a '
        "restart. Unset: no HTTP.",
    )
    # POST /hooks/sync and /hooks/run on `listen` (the daemon's hooks): the shared secret
    # that signs their bodies; without one the hook routes answer 404
    hook_secret_file: Path | None = Field(
        None,
        description="A file (mode 0600) holding the shared secret that signs `POST "
        "/hooks/sync` and `/hooks/run` on `listen`; without a hook secret those "
        "routes answer 404. One of this and `hook_secret_env`.",
    )
    hook_secret_env: str | None = Field(
        None,
        description="The environment variable holding the hook secret, instead of "
        "`hook_secret_file`.",
    )
    # the operator's page on `listen` (the console): the token that signs an operator in
    console_token_file: Path | None = Field(
        None,
        description="A file (mode 0600) holding the token an operator signs in with on the "
        "page served at `listen` (`/login`, or `Authorization: Bearer` from a script). "
        "Without a console token the page is read-only. One of this and `console_token_env`.",
    )
    console_token_env: str | None = Field(
        None,
        description="The environment variable holding the console token, instead of "
        "`console_token_file`.",
    )
    # the limits of the daemon's HTTP server: no client can starve the others
    http_read_timeout_s: int = Field(
        10,
        ge=1,
        le=3600,
        description="Seconds a client of `listen` has to send a whole request, and that an "
        "idle connection is kept; past them the connection is closed.",
    )
    http_max_connections: int = Field(
        512,
        ge=8,
        le=1_000_000,
        description="Connections `listen` holds open at once; more wait in the kernel's queue "
        "until one closes. Kept 128 below the open-file limit (`LimitNOFILE`).",
    )
    http_threads: int = Field(
        4,
        ge=1,
        le=64,
        description="Threads that answer requests once they have arrived whole; a slow or "
        "silent client holds none.",
    )

    @model_validator(mode="before")
    @classmethod
    def _relative_paths(cls, data: Any, info: ValidationInfo) -> Any:
        return _anchor(data, info, ("hook_secret_file", "console_token_file"))

    @model_validator(mode="after")
    def _one_hook_secret(self) -> DaemonSettings:
        if self.hook_secret_file is not None and self.hook_secret_env is not None:
            raise ValueError("set one of hook_secret_file and hook_secret_env, not both")
        if self.console_token_file is not None and self.console_token_env is not None:
            raise ValueError("set one of console_token_file and console_token_env, not both")
        return self

    @property
    def console_actions(self) -> bool:
        """A console token is configured: a signed-in operator may act on the page."""
        return self.console_token_file is not None or self.console_token_env is not None

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


class MonitorSettings(Strict):
    """URLs pinged at the start, on success and on failure of each run (healthchecks.io style)."""

    start_url: str | None = Field(None, description="POSTed when a run starts.")
    success_url: str | None = Field(
        None, description="Gets the run's JSON summary on exit 0 (and 75)."
    )
    failure_url: str | None = Field(
        None,
        description='Gets `{"result", "exit_code", "error" or "summary"}` on any other '
        "exit, including 1 (rejected products).",
    )
    timeout_s: float = Field(
        10.0, gt=0, description="Seconds per ping; a failed ping is logged and never fails the run."
    )


class Settings(BaseSettings):
    """The whole config. Loaded through pydantic-settings, whose sources are the config's
    raw reading (the TOML file, the environment the loader was given); strict and frozen
    like every table. ``Settings(**tables)`` builds one in code from its arguments alone."""

    # BaseSettings validates defaults; these tables' defaults are valid as they stand
    model_config = SettingsConfigDict(extra="forbid", frozen=True, validate_default=False)

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
    # the loader's raw reading (a RawConfig) these were built from; None: a model built in code
    _reading: Any = PrivateAttr(default=None)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The raw reading being loaded, as a TOML and an environment source; never the
        process environment, a dotenv file or a secrets folder of pydantic-settings' own."""
        return reading.sources(settings_cls, init_settings)

    @property
    def read_identity(self) -> str | None:
        """What the loader read, digested (the reading's identity); None: built in code."""
        return None if self._reading is None else str(self._reading.identity)

    @property
    def reading(self) -> Any:
        """The loader's raw reading (a ``RawConfig``), for the quick lane's record: the same
        reading, not a second one (each secret file is read once per start)."""
        return self._reading

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
        """Every API key of the workspace (one, usually), in the order the key chain finds them."""
        return list(self.api.api_keys) or [self.api_key()]

    def redacted(self) -> dict[str, Any]:
        """The effective config as plain data, secrets shown as ``***`` (for ``skuferry check``)."""
        data: dict[str, Any] = masked(self.model_dump(), by_name=False)
        source = data.get("source")
        if isinstance(source, dict) and source.get("preset"):
            source["preset_filled"] = presets.filled(self.source.model_dump())
        return data
