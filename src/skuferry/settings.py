"""Configuration: a TOML file plus environment overrides, every problem reported at once.

SKELETON: the model shape below is the contract other modules code against.
Loading (``load_settings``), error formatting and cross-field rules are filled in
by the settings work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr


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
    CsvSourceSettings | JsonlSourceSettings,  # http, sql are added by their issue
    Field(discriminator="type"),
]


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
        """The resolved API key (env > api_key > api_key_file), resolved at load time."""
        if self.api.api_key is None:  # pragma: no cover - load_settings guarantees it
            raise RuntimeError("api key not resolved")
        return self.api.api_key


def load_settings(path: Path | str | None, env: dict[str, str] | None = None) -> Settings:
    raise NotImplementedError  # filled in by the settings work


def settings_from_dict(data: dict[str, Any], *, origin: str = "<dict>") -> Settings:
    raise NotImplementedError  # filled in by the settings work
