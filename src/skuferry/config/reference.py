"""The configuration reference, written from the settings schema itself.

``render()`` walks :class:`Settings`: every table, every key with its type, default,
allowed values and the description its pydantic field carries. The docs build writes
it to the configuration reference page before building the site (``main`` with the
page's path), and a test fails when the page in the repository is stale, so a key
cannot be documented wrong, twice, or not at all.

    python -m skuferry.config.reference <the reference page>
"""

from __future__ import annotations

import json
import re
import sys
import types
from collections.abc import Generator, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, JsonValue, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from skuferry.config.schema import SOURCE_MODELS, FileSourceSettings, IncrementalPull, Settings

# Fields of Settings that the loader fills in, not the file.
NOT_KEYS = frozenset({"config_path"})

HEADER = """\
# Configuration reference

<!-- Generated from the settings schema by `python3 dev.py docs`
     (python -m skuferry.config.reference); do not edit: a test fails when it is stale. -->

Every table and key of the config file, generated from the settings schema that
validates it, so this page cannot drift from what skuferry accepts.
`config.example.toml` is a commented starting point; this page is the complete list.

- **Unknown keys are errors**, and every problem in a file is reported at once:
  `my.toml: at 'budget.write_per_minute': must be > 0`.
- Relative paths resolve against the folder of the config file. Path values may use
  `$VAR` / `${VAR}` (an unset variable is an error) and `~`.
- **Any key from the environment**: `SKUFERRY_<TABLE>__<KEY>`, a double underscore
  between levels, wins over the file key by key (`SKUFERRY_BUDGET__WRITE_PER_MINUTE=30`;
  lists and tables as JSON). The single names `SKUFERRY_CONFIG`, `SKUFERRY_API_KEY`,
  `SKUFERRY_API_KEYS`, `SKUFERRY_STATE_PATH` and `SKUFERRY_SOURCE_PATH` keep their
  meaning: see [Commands](../commands.md#any-config-key-from-the-environment).
- **Secrets** (marked *secret* below) follow one order, environment > file > inline,
  and are never printed: see [Security](../security.md).
"""


def render() -> str:
    """The whole reference page as Markdown."""
    out = [HEADER]
    tables = [(name, f) for name, f in Settings.model_fields.items() if name not in NOT_KEYS]
    out.append("| table | what it holds |\n|---|---|")
    for name, field in tables:
        model = _model_of(field.annotation)
        summary = "where the catalog comes from" if name == "source" else ""
        summary = summary or (_doc(model).split(". ")[0].rstrip(".") if model else "")
        out.append(f"| [`{_title(name, field)}`](#{name}) | {_cell(summary)} |")
    out.append("")
    for name, field in tables:
        if name == "source":
            out.extend(_source_section())
            continue
        model = _model_of(field.annotation)
        if model is None:
            raise TypeError(f"[{name}] is not a table of settings")
        out.extend(_model_section(_title(name, field), name, model, level=2))
    return "\n".join(out).rstrip() + "\n"


def _shared_keys(
    base: type[BaseModel], what: str, anchor: str, lead: str, common: set[str]
) -> Generator[str, None, set[str]]:
    """The keys that every source type built on ``base`` takes beyond ``common``; returns them."""
    kinds = sorted(_source_type(m) for m in SOURCE_MODELS if issubclass(m, base))
    shared = set(base.model_fields) - common - {"type"}
    yield f"### Keys of every {what} {{ #source-{anchor} }}\n"
    yield (
        lead + " (" + ", ".join(f"`{t}`" for t in kinds) + ") also take these. " + _doc(base) + "\n"
    )
    yield from _table({k: f for k, f in base.model_fields.items() if k in shared})
    return shared


def _title(name: str, field: FieldInfo) -> str:
    """``[api]``, or ``[[join]]`` for an array of tables."""
    return f"[[{name}]]" if get_origin(_strip(field.annotation)) is list else f"[{name}]"


def _source_section() -> Iterator[str]:
    yield "## `[source]` { #source }\n"
    yield (
        "Where the catalog comes from. `type` selects one of: "
        + ", ".join(f"[`{t}`](#source-{t})" for t in _source_types())
        + ". Each type takes the keys common to all types and its own.\n"
    )
    common = set.intersection(*(set(m.model_fields) for m in SOURCE_MODELS)) - {"type"}
    first = SOURCE_MODELS[0]
    yield "### Keys of every source type { #source-common }\n"
    yield from _table({k: first.model_fields[k] for k in first.model_fields if k in common})
    shared = yield from _shared_keys(
        FileSourceSettings, "file source", "files", "The file sources", common
    )
    common |= shared
    windows = yield from _shared_keys(
        IncrementalPull,
        "incremental source",
        "incremental",
        "The sources that pull incrementally",
        common,
    )
    for model in sorted(SOURCE_MODELS, key=_source_type):
        kind = _source_type(model)
        yield f'### `type = "{kind}"` {{ #source-{kind} }}\n'
        doc = _doc(model)
        if doc:
            yield doc + "\n"
        skip = common if issubclass(model, FileSourceSettings) else common - shared
        if issubclass(model, IncrementalPull):
            skip = skip | windows
        own = {k: f for k, f in model.model_fields.items() if k not in skip and k != "type"}
        yield from _table(own)


def _model_section(title: str, anchor: str, model: type[BaseModel], level: int) -> Iterator[str]:
    yield f"{'#' * level} `{title}` {{ #{anchor.replace('.', '-')} }}\n"
    doc = _doc(model)
    if doc:
        yield doc + "\n"
    yield from _table(model.model_fields)
    for key, field in model.model_fields.items():
        inner = _model_of(field.annotation)
        if inner is not None and not _several_models(field.annotation):
            sub = f"{title.strip('[]')}.{key}"
            if _is_dict(field.annotation):
                sub += ".NAME"
            yield from _model_section(f"[{sub}]", f"{anchor}.{key}", inner, level=min(level + 1, 4))


def _table(fields: dict[str, FieldInfo]) -> Iterator[str]:
    if not fields:
        yield "No keys of its own.\n"
        return
    yield "| key | type | default | allowed | description |"
    yield "|---|---|---|---|---|"
    for key, field in fields.items():
        cells = [
            f"`{key}`",
            _type_name(field.annotation),
            _default(field),
            _allowed(field),
            field.description or "",
        ]
        yield "| " + " | ".join(_cell(c) for c in cells) + " |"
    yield ""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _doc(model: type[BaseModel]) -> str:
    """The first paragraph of a model's docstring, with reST literals as Markdown."""
    if model.__doc__ is None or model.__doc__ is BaseModel.__doc__:
        return ""
    first = model.__doc__.strip().split("\n\n")[0]
    text = " ".join(line.strip() for line in first.splitlines()).replace("``", "`")
    return re.sub(r" \([\w/]+\.py\)", "", text)  # a module named in parentheses is for developers


def _source_type(model: type[BaseModel]) -> str:
    return str(get_args(model.model_fields["type"].annotation)[0])


def _source_types() -> list[str]:
    return sorted(_source_type(m) for m in SOURCE_MODELS)


def _strip(annotation: Any) -> Any:
    """Drop ``Annotated`` and ``None`` from a union: the type a user writes."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if _is_union(annotation):
        members = [a for a in get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return _strip(members[0])
    return annotation


def _is_union(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType)


def _is_dict(annotation: Any) -> bool:
    return get_origin(_strip(annotation)) is dict


def _several_models(annotation: Any) -> bool:
    """A union of settings models (a ``[source]``): its types have sections of their own."""
    members = get_args(_strip(annotation)) if _is_union(_strip(annotation)) else ()
    return sum(_model_of(m) is not None for m in members) > 1


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The settings model a field holds (directly, in a union, or as a table's values)."""
    annotation = _strip(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _type_name(annotation: Any) -> str:
    annotation = _strip(annotation)
    origin = get_origin(annotation)
    if annotation is JsonValue:
        return "any TOML value"
    if origin is Literal:
        return "text" if all(isinstance(a, str) for a in get_args(annotation)) else "value"
    if _is_union(annotation):
        members = [_strip(a) for a in get_args(annotation)]
        if set(members) == {Path, str}:
            return "path or URL"
        return " or ".join(dict.fromkeys(_type_name(a) for a in members))
    if origin in (list, tuple):
        return f"list of {_inner(get_args(annotation)[0])}"
    if origin is dict:
        return f"table of {_inner(get_args(annotation)[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table"
    names = {
        str: "text",
        int: "integer",
        float: "number",
        Decimal: "number",
        bool: "boolean",
        Path: "path",
        SecretStr: "text (*secret*)",
    }
    if annotation in names:
        return names[annotation]
    raise TypeError(f"no reference name for the type {annotation!r}")


def _inner(annotation: Any) -> str:
    name = _type_name(annotation)
    return f"({name})" if " or " in name else name


def _default(field: FieldInfo) -> str:
    extra = field.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("default_text"), str):
        return str(extra["default_text"])  # a default the loader fills in
    if field.is_required():
        return "**required**"
    if field.default_factory is not None:
        value: Any = field.default_factory()  # type: ignore[call-arg]
    else:
        value = field.default
    if value is None:
        return "unset"
    if value is PydanticUndefined:  # pragma: no cover - is_required() covers it
        return "**required**"
    if isinstance(value, BaseModel):
        return "(its keys' defaults)"
    return f"`{_toml(value)}`"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Path):
        return json.dumps(str(value))
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for the default {value!r}")


def _allowed(field: FieldInfo) -> str:
    parts: list[str] = []
    literal = _literal(field.annotation)
    if literal:
        parts.append(", ".join(f"`{_toml(v)}`" for v in literal))
    bounds = (
        (annotated_types.Gt, "gt", "> {}"),
        (annotated_types.Ge, "ge", ">= {}"),
        (annotated_types.Lt, "lt", "< {}"),
        (annotated_types.Le, "le", "<= {}"),
        (annotated_types.MinLen, "min_length", "at least {} long"),
        (annotated_types.MaxLen, "max_length", "at most {} long"),
    )
    for meta in field.metadata:
        for kind, attribute, text in bounds:
            if isinstance(meta, kind):
                parts.append(text.format(_number(getattr(meta, attribute))))
    return "; ".join(parts)


def _number(value: Any) -> str:
    return f"{value:,}".replace(",", "\u202f") if isinstance(value, int) else str(value)


def _literal(annotation: Any) -> tuple[Any, ...]:
    annotation = _strip(annotation)
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    return ()


def main(argv: list[str]) -> int:
    """Write the reference to the one path given, or print it."""
    text = render()
    if not argv:
        sys.stdout.write(text)
        return 0
    Path(argv[0]).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
