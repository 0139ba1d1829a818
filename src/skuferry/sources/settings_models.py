"""Config models of the http and sql sources (``[source] type = "http" | "sql"``).

STUB: filled in by the http/sql sources work; settings.py puts these in the
``[source]`` union.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class HttpSourceSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["http"]
    url: str


class SqlSourceSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["sql"]
    url: str
    table: str | None = None
    query: str | None = None
