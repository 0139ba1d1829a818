"""The config's shape: one pydantic model per TOML table, strict (unknown keys are errors).

``settings.py`` loads and validates a file into these; everything else reads them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from skuferry.config.sources import HttpSourceSettings, SqlSourceSettings


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ApiSettings(_Strict):
    base_url: str
    api_key: SecretStr | None = None
    api_key_file: Path | None = None
    timeout_s: float = Field(30.0, gt=0)
    update_method: Literal["patch", "put", "none"] = "patch"
    max_in_flight: int = Field(4, ge=1, le=64)
    max_retries: int = Field(3, ge=0, le=10)
    page_size: int = Field(100, ge=1, le=100)

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


class FieldSpec(_Strict):
    column: str
    type: Literal["string", "integer", "decimal", "boolean", "json"] = "string"
    required: bool = False


class MappingSettings(_Strict):
    key: str = "sku"
    fields: dict[str, str | FieldSpec] | None = None


class CsvSourceSettings(_Strict):
    type: Literal["csv"]
    path: Path
    encoding: str = "utf-8"
    delimiter: str = ","


class JsonlSourceSettings(_Strict):
    type: Literal["jsonl"]
    path: Path
    encoding: str = "utf-8"


SourceSettings = Annotated[
    CsvSourceSettings | JsonlSourceSettings | HttpSourceSettings | SqlSourceSettings,
    Field(discriminator="type"),
]
SOURCE_MODELS: tuple[type[BaseModel], ...] = (
    CsvSourceSettings,
    JsonlSourceSettings,
    HttpSourceSettings,
    SqlSourceSettings,
)
SOURCE_TYPES: tuple[str, ...] = tuple(
    get_args(model.model_fields["type"].annotation)[0] for model in SOURCE_MODELS
)
FILE_SOURCE_TYPES = ("csv", "jsonl")  # the sources with a `path` (SKUFERRY_SOURCE_PATH)


class BudgetSettings(_Strict):
    read_per_minute: int = Field(300, gt=0)
    write_per_minute: int = Field(60, gt=0)
    egress_per_minute: int | None = Field(None, gt=0)
    limiter: Literal["window", "bucket"] = "window"
    safety_margin: float = Field(0.01, ge=0, lt=0.5)  # fraction of the rate kept back
    clock_skew_s: float = Field(0.5, ge=0, le=10)  # jitter allowance between us and the server


class ScheduleSettings(_Strict):
    interval_minutes: float | None = Field(None, gt=0)
    cron: str | None = None
    run_at_start: bool = True
    jitter_s: int = Field(0, ge=0)
    misfire_grace_s: int = Field(300, gt=0)
    verify_every: int = Field(0, ge=0)  # walk the remote every N runs (0: never)


class StateSettings(_Strict):
    path: Path


class SafetySettings(_Strict):
    max_change_ratio: float = Field(0.5, gt=0, le=1)


class MetricsSettings(_Strict):
    textfile: Path | None = None


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
    metrics: MetricsSettings = MetricsSettings()
    monitor: MonitorSettings = MonitorSettings()
    config_path: Path | None = None  # the file these came from, for messages

    def api_key(self) -> SecretStr:
        """The API key, resolved at load time.

        Order: ``SKUFERRY_API_KEY`` > ``[api] api_key`` > ``[api] api_key_file``
        > ``$CREDENTIALS_DIRECTORY/api_key``.
        """
        if self.api.api_key is None:  # pragma: no cover - load_settings guarantees it
            raise RuntimeError("api key not resolved")
        return self.api.api_key

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
