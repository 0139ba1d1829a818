"""The one base of every config table's model: strict (an unknown key is an error) and frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """A TOML table: unknown keys are errors (with a did-you-mean from the loader), and a
    loaded config never changes under the code that reads it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
