"""The documentation site: the config reference is the schema's, config.example.toml uses
only the schema's keys, and the README's links lead somewhere.

The site itself is built by ``python3 dev.py docs`` / ``dev.py lint`` with
``mkdocs build --strict``, which fails on a broken link, anchor or nav entry.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel

from skuferry.config import reference
from skuferry.config.schema import SOURCE_MODELS, FieldSpec, MappingSettings, Settings, TableFile

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "docs" / "reference" / "config.md"
EXAMPLE = REPO / "config.example.toml"


def _tables() -> dict[str, list[type[BaseModel]]]:
    """Each top-level table of the config file and the models its keys come from."""
    tables: dict[str, list[type[BaseModel]]] = {}
    for name, field in Settings.model_fields.items():
        if name in reference.NOT_KEYS:
            continue
        if name == "source":
            tables[name] = list(SOURCE_MODELS)
        else:
            model = reference._model_of(field.annotation)  # [api], or [[join]]'s JoinSettings
            assert model is not None, name
            tables[name] = [model]
    return tables


def test_the_committed_reference_is_the_schemas() -> None:
    assert REFERENCE.read_text(encoding="utf-8") == reference.render(), (
        "docs/reference/config.md is stale: run `python3 dev.py docs` and commit it"
    )


def test_the_reference_has_one_row_per_key_of_each_table() -> None:
    text = reference.render()
    sections = re.split(r"(?m)^#{2,4} .*\{ #([\w-]+) \}$", text)
    rows = {
        anchor: re.findall(r"(?m)^\| `(\w+)` \|", body)
        for anchor, body in zip(sections[1::2], sections[2::2], strict=True)
    }
    for anchor, keys in rows.items():
        assert len(keys) == len(set(keys)), f"#{anchor} lists a key twice: {keys}"
    for name, models in _tables().items():
        if name == "source":
            for model in models:
                kind = model.model_fields["type"].annotation.__args__[0]  # type: ignore[union-attr]
                documented = {"type"} | set(rows[f"source-{kind}"]) | set(rows["source-common"])
                if "path" in model.model_fields:
                    documented |= set(rows["source-files"])
                if "full_every" in model.model_fields:  # the incremental sources
                    documented |= set(rows["source-incremental"])
                assert documented == set(model.model_fields), kind
        else:
            assert rows[name] == list(models[0].model_fields), name
    assert rows["mapping-fields"] == list(FieldSpec.model_fields)


def test_every_key_has_a_description() -> None:
    """A new key needs ``Field(description=...)``, then ``python3 dev.py docs`` to show it."""
    tables: dict[str, list[type[BaseModel]]] = {
        **_tables(),
        "mapping.fields": [FieldSpec],
        "mapping.tables": [TableFile],
    }
    missing = [
        f"{name}.{key}"
        for name, models in tables.items()
        for model in models
        for key, field in model.model_fields.items()
        if not (name == "source" and key == "type")  # the type's page says what it is
        if not field.description
    ]
    assert missing == [], "keys without Field(description=...): add one, run dev.py docs"


def _example_sections() -> dict[str, str]:
    """Each table's part of config.example.toml (``# [[join]]`` is shown commented out)."""
    text = EXAMPLE.read_text(encoding="utf-8")
    parts = re.split(r"(?m)^(?:\[([\w.]+)\]|# \[\[(\w+)\]\])\s*$", text)
    names = [a or b for a, b in zip(parts[1::3], parts[2::3], strict=True)]
    return dict(zip(names, parts[3::3], strict=True))


def test_config_example_has_every_table_of_the_schema() -> None:
    sections = _example_sections()
    assert set(_tables()) <= set(sections), sorted(set(_tables()) - set(sections))


def test_every_key_in_config_example_is_a_schema_key() -> None:
    """Set keys and commented-out ones (``# key = ...``) alike: none is made up."""
    tables = _tables()
    data = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    for name, body in _example_sections().items():
        top = name.split(".")[0]
        allowed = {key for model in tables[top] for key in model.model_fields}
        if top == "mapping":  # the comments show a field's own keys (column, path, ...)
            allowed |= set(FieldSpec.model_fields)
        if top == "join":  # besides name, key and on: a source's keys, as in [source]
            allowed |= {key for model in SOURCE_MODELS for key in model.model_fields}
        if name == "mapping.fields":  # target field names are the user's own
            continue
        set_keys = set(data[top]) if name == top and top in data else set()
        commented = set(re.findall(r"(?m)^#[\s#]*([a-z_]+)\s*=", body))
        for key in set_keys | commented:
            assert key in allowed, f"config.example.toml [{name}] {key} is not a schema key"
    assert set(data) <= set(tables)
    assert set(data["mapping"]) <= set(MappingSettings.model_fields)


README_LINK = re.compile(r"\]\(((?!https?://|#)[^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", ["README.md"])
def test_the_readmes_links_lead_to_files_that_exist(page: str) -> None:
    text = (REPO / page).read_text(encoding="utf-8")
    targets = README_LINK.findall(text)
    missing = [t for t in targets if not (REPO / t).exists()]
    assert missing == [], f"{page} links to files that do not exist: {missing}"
