"""The ``logger`` field: named after the module, less the sync's stage package."""

from __future__ import annotations

import io
import json

import pytest

from skuferry import logs


@pytest.mark.parametrize(
    ("module", "field"),
    [
        ("skuferry.sync.write.writer", "skuferry.sync.writer"),
        ("skuferry.sync.read.pieces", "skuferry.sync.pieces"),
        ("skuferry.sync.write.check_then_create", "skuferry.sync.check_then_create"),
        ("skuferry.sync.engine", "skuferry.sync.engine"),
        ("skuferry.sync.skip", "skuferry.sync.skip"),
        ("skuferry.service.daemon", "skuferry.service.daemon"),
        ("skuferry.sources.write.x", "skuferry.sources.write.x"),
    ],
)
def test_the_logger_field_leaves_the_stage_package_out(module: str, field: str) -> None:
    out = io.StringIO()
    logs.configure(level="info", json=True, stream=out)
    logs.get(module).info("t.event")
    assert json.loads(out.getvalue())["logger"] == field
