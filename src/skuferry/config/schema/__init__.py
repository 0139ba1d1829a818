"""The config's types: one pydantic model per TOML table, and nothing that loads a file.

Every layer imports its settings types from here (``from skuferry.config.schema import
Settings``); the config loader reads a file and the environment into them. The models
are the tables (``Settings`` and its parts) and the ``[source]`` types, on one strict
base (``Strict``).
"""

from skuferry.config.schema.base import Strict
from skuferry.config.schema.settings import (
    FILE_SOURCE_TYPES,
    SOURCE_MODELS,
    SOURCE_TYPES,
    THOUSANDS_SEPARATORS,
    ApiSettings,
    BudgetSettings,
    CsvSourceSettings,
    DaemonSettings,
    FieldSpec,
    FinalNewline,
    GoneSettings,
    JoinSettings,
    JsonlSourceSettings,
    MappingSettings,
    MetricsSettings,
    MonitorSettings,
    SafetySettings,
    ScheduleSettings,
    Settings,
    ShortRows,
    SourceSettings,
    StateSettings,
    TableFile,
)
from skuferry.config.schema.sources import (
    ApiSourceSettings,
    FileSourceSettings,
    GraphqlSourceSettings,
    HttpSourceSettings,
    IncrementalPull,
    SourceCommon,
    SqlSourceSettings,
    XlsxSourceSettings,
    XmlSourceSettings,
    anchor_sqlite_url,
    check_since_format,
)
from skuferry.models import METRIC_LABELS

__all__ = [
    "FILE_SOURCE_TYPES",
    "METRIC_LABELS",
    "SOURCE_MODELS",
    "SOURCE_TYPES",
    "THOUSANDS_SEPARATORS",
    "ApiSettings",
    "ApiSourceSettings",
    "BudgetSettings",
    "CsvSourceSettings",
    "DaemonSettings",
    "FieldSpec",
    "FileSourceSettings",
    "FinalNewline",
    "GoneSettings",
    "GraphqlSourceSettings",
    "HttpSourceSettings",
    "IncrementalPull",
    "JoinSettings",
    "JsonlSourceSettings",
    "MappingSettings",
    "MetricsSettings",
    "MonitorSettings",
    "SafetySettings",
    "ScheduleSettings",
    "Settings",
    "ShortRows",
    "SourceCommon",
    "SourceSettings",
    "SqlSourceSettings",
    "StateSettings",
    "Strict",
    "TableFile",
    "XlsxSourceSettings",
    "XmlSourceSettings",
    "anchor_sqlite_url",
    "check_since_format",
]
