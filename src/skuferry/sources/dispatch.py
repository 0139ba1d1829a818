"""``open_source``: the ``[source]`` table's settings to its adapter, one typed branch per type.

A ``match`` over the settings union instead of a registry filled by import side
effects: a new source type is one model in the config schema plus one branch
here, and mypy reports a type left without one (``assert_never``). Adapters are
imported in their branch only, so a csv sync never imports SQLAlchemy.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import assert_never

from skuferry.config.schema import (
    CsvSourceSettings,
    FileSourceSettings,
    GraphqlSourceSettings,
    HttpSourceSettings,
    JsonlSourceSettings,
    SourceSettings,
    SqlSourceSettings,
    XlsxSourceSettings,
    XmlSourceSettings,
)
from skuferry.sources.base import Source
from skuferry.sources.skip import skip_empty_rows
from skuferry.sources.wiring import Wiring


def open_source(settings: SourceSettings, *, stop: threading.Event | None = None) -> Source:
    """Build the source the ``[source]`` table describes (nothing is read yet).

    ``stop`` (the engine's stop event) ends the API sources' waits between retries: it
    is the one part of their ``Wiring`` a run sets; the rest is the real world.
    """
    source = _open(settings, stop)
    if isinstance(settings, FileSourceSettings) and settings.ready_file is not None:
        from skuferry.sources.ready import ReadyGate, ReadySource  # waits for the exporter

        gate = ReadyGate(
            Path(settings.path), settings.ready_file, timeout_s=settings.ready_timeout_s, stop=stop
        )
        source = ReadySource(source, gate)
    return skip_empty_rows(source, settings.skip_if_empty)  # every type, once


def _open(settings: SourceSettings, stop: threading.Event | None = None) -> Source:
    if isinstance(settings, FileSourceSettings) and settings.remote_scheme():
        from skuferry.sources.fetch import RemoteFileSource  # downloads, then opens it here

        return RemoteFileSource(settings, open_local=_open)
    match settings:
        case CsvSourceSettings():
            from skuferry.sources.csv import open_csv

            return open_csv(settings)
        case JsonlSourceSettings():
            from skuferry.sources.jsonl import open_jsonl

            return open_jsonl(settings)
        case HttpSourceSettings():
            from skuferry.sources.http import open_http_source

            return open_http_source(settings, Wiring(stop=stop))
        case GraphqlSourceSettings():
            from skuferry.sources.graphql import open_graphql_source

            return open_graphql_source(settings, Wiring(stop=stop))
        case SqlSourceSettings():
            from skuferry.sources.sql import open_sql_source

            return open_sql_source(settings)
        case XmlSourceSettings():
            from skuferry.sources.xml import open_xml

            return open_xml(settings)
        case XlsxSourceSettings():
            from skuferry.sources.xlsx import open_xlsx

            return open_xlsx(settings)
    assert_never(settings)  # mypy: a source type without a branch here is an error
