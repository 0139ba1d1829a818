"""``[source]`` validated by the one model its ``type`` names (config/schema/settings.py).

It replaced pydantic's discriminated union so that a start builds one source model
instead of seven (``tests/integration/test_startup_imports.py`` checks that part in a
fresh interpreter); these tests hold it to what the union did: the same error types and
locations, model instances passed through, the same JSON schema.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from skuferry.config.schema import (
    SOURCE_MODELS,
    SOURCE_TYPES,
    CsvSourceSettings,
    Settings,
    SourceSettings,
    SqlSourceSettings,
)

SOURCE: TypeAdapter[Any] = TypeAdapter(SourceSettings)


def _errors(value: object) -> list[tuple[str, tuple[int | str, ...]]]:
    with pytest.raises(ValidationError) as caught:
        SOURCE.validate_python(value)
    return [(e["type"], tuple(e["loc"])) for e in caught.value.errors()]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("catalog.csv", [("model_attributes_type", ())]),
        (None, [("model_attributes_type", ())]),
        ({}, [("union_tag_not_found", ())]),
        ({"type": "cvs"}, [("union_tag_invalid", ())]),
        ({"type": 5}, [("union_tag_invalid", ())]),
        ({"type": "csv"}, [("missing", ("path",))]),
        ({"type": "csv", "path": "a.csv", "delimter": ";"}, [("extra_forbidden", ("delimter",))]),
        ({"type": "sql", "url": "nope", "table": "t"}, [("value_error", ("url",))]),
    ],
)
def test_errors_keep_the_union_types_and_the_keys_below_the_table(
    value: object, expected: list[tuple[str, tuple[int | str, ...]]]
) -> None:
    assert _errors(value) == expected


def test_a_bad_tag_names_every_source_type() -> None:
    with pytest.raises(ValidationError) as caught:
        SOURCE.validate_python({"type": "cvs"})
    ctx = caught.value.errors()[0].get("ctx") or {}
    assert ctx["tag"] == "cvs"
    assert ctx["expected_tags"] == ", ".join(f"'{t}'" for t in SOURCE_TYPES)


def test_each_type_gets_its_own_model_and_the_config_dir() -> None:
    csv = SOURCE.validate_python({"type": "csv", "path": "a.csv"})
    assert type(csv) is CsvSourceSettings
    sql = SOURCE.validate_python(
        {"type": "sql", "url": "sqlite:///catalog.db", "table": "t"},
        context={"config_dir": Path("/srv/skuferry")},
    )
    assert type(sql) is SqlSourceSettings
    assert sql.url == "sqlite:////srv/skuferry/catalog.db"  # anchored: the context got through


def test_a_model_instance_passes_through() -> None:
    made = CsvSourceSettings(type="csv", path="a.csv")
    assert SOURCE.validate_python(made) is made
    settings = Settings.model_validate(
        {"api": {"base_url": "http://127.0.0.1:9"}, "source": made, "state": {"path": "s.db"}}
    )
    assert settings.source is made
    assert settings.model_dump()["source"] == made.model_dump()


def test_the_json_schema_is_the_discriminated_union() -> None:
    schema = Settings.model_json_schema()
    source = schema["properties"]["source"]
    assert source["discriminator"]["propertyName"] == "type"
    mapping = source["discriminator"]["mapping"]
    assert sorted(mapping) == sorted(SOURCE_TYPES)
    assert {ref.rsplit("/", 1)[-1] for ref in mapping.values()} == {
        model.__name__ for model in SOURCE_MODELS
    }
