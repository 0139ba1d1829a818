"""Config models of the http and sql sources (``[source] type = "http" | "sql"``).

settings.py puts both in the ``[source]`` union. Secrets (a bearer token, a
password) come inline (``SecretStr``), from a file, or from an environment
variable; they are resolved when the source opens, never echoed.

Relative paths (``token_file``, ``password_file``, a relative ``sqlite:///`` URL)
resolve against the config file's folder when the loader passes
``context={"config_dir": <folder>}`` to ``model_validate``, else against the
working directory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from skuferry.errors import ConfigError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _config_dir(info: ValidationInfo) -> Path | None:
    ctx = info.context
    if isinstance(ctx, Mapping) and ctx.get("config_dir") is not None:
        return Path(ctx["config_dir"])
    return None


def _anchor(data: Any, info: ValidationInfo, keys: tuple[str, ...]) -> Any:
    """Make relative file paths in ``data`` absolute against the config folder."""
    base = _config_dir(info)
    if base is None or not isinstance(data, dict):
        return data
    out = dict(data)
    for key in keys:
        value = out.get(key)
        if isinstance(value, str | os.PathLike) and not Path(value).expanduser().is_absolute():
            out[key] = str(base / Path(value))
    return out


def read_secret(
    *,
    inline: SecretStr | None,
    file: Path | None,
    env_name: str | None,
    key: str,
    env: Mapping[str, str] | None = None,
) -> SecretStr | None:
    """The secret from whichever of inline / ``<key>_file`` / ``<key>_env`` is set."""
    if inline is not None:
        return inline
    environ = os.environ if env is None else env
    if env_name is not None:
        value = environ.get(env_name)
        if not value:
            raise ConfigError(
                [f"at 'source.{key}_env': environment variable {env_name} is not set or empty"]
            )
        return SecretStr(value)
    if file is not None:
        try:
            text = file.expanduser().read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                [f"at 'source.{key}_file': cannot read {file}: {exc.strerror or exc}"]
            ) from None
        if not text:
            raise ConfigError([f"at 'source.{key}_file': {file} is empty"])
        return SecretStr(text)
    return None


def _one_secret(
    value: SecretStr | None, info: ValidationInfo, key: str, *, needed: bool, why: str
) -> None:
    given = [
        name
        for name, present in (
            (key, value is not None),
            (f"{key}_file", info.data.get(f"{key}_file") is not None),
            (f"{key}_env", info.data.get(f"{key}_env") is not None),
        )
        if present
    ]
    if len(given) > 1:
        raise ValueError(f"give only one of {', '.join(given)}")
    if needed and not given:
        raise ValueError(f"{why} needs one of {key}, {key}_file or {key}_env")


class HttpSourceSettings(_Strict):
    """A JSON API walked page by page (a PIM's REST endpoint)."""

    type: Literal["http"]
    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    items_path: str = ""  # dotted path to the list in each response; "" = the body is the list

    # auth: the fields a validator reads come before the field it validates
    auth: Literal["none", "bearer", "basic"] = "none"
    token_file: Path | None = None
    token_env: str | None = None
    token: SecretStr | None = Field(default=None, validate_default=True)
    password_file: Path | None = None
    password_env: str | None = None
    username: str | None = Field(default=None, validate_default=True)
    password: SecretStr | None = Field(default=None, validate_default=True)

    # pagination; "next_link" also covers an API that does not paginate (no link: one page)
    pagination: Literal["page", "offset", "cursor", "next_link", "none"] = "next_link"
    page_size: int = Field(100, ge=1, le=100_000)
    size_param: str = "limit"  # "" = do not send a page size
    page_param: str = "page"
    first_page: int = Field(1, ge=0)
    total_pages_path: str | None = None  # e.g. "meta.pages"; absent: stop at a short page
    offset_param: str = "offset"
    total_path: str | None = None  # e.g. "meta.total"; absent: stop at a short page
    cursor_param: str = "cursor"  # or "search_after"
    next_path: str = "_links.next.href"
    cursor_path: str | None = Field(default=None, validate_default=True)

    # transport
    requests_per_minute: int | None = Field(None, gt=0)
    timeout_s: float = Field(30.0, gt=0)
    max_retries: int = Field(3, ge=0, le=10)

    @model_validator(mode="before")
    @classmethod
    def _relative_paths(cls, data: Any, info: ValidationInfo) -> Any:
        return _anchor(data, info, ("token_file", "password_file"))

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("token")
    @classmethod
    def _token(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        _one_secret(value, info, "token", needed=info.data.get("auth") == "bearer",
                    why='auth = "bearer"')
        return value

    @field_validator("username")
    @classmethod
    def _username(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("auth") == "basic" and not value:
            raise ValueError('auth = "basic" needs a username')
        return value

    @field_validator("password")
    @classmethod
    def _password(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        _one_secret(value, info, "password", needed=info.data.get("auth") == "basic",
                    why='auth = "basic"')
        return value

    @field_validator("cursor_path")
    @classmethod
    def _cursor_path(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("pagination") == "cursor" and not value:
            raise ValueError(
                'pagination = "cursor" needs cursor_path, the dotted path of the next '
                'cursor in each response (e.g. "meta.next_cursor")'
            )
        return value


class SqlSourceSettings(_Strict):
    """A table or query in a database SQLAlchemy can reach.

    A relative ``sqlite:///catalog.db`` is relative to the config file's folder.
    """

    type: Literal["sql"]
    url: str = Field(repr=False)  # may hold a password; kept out of repr
    password_file: Path | None = None
    password_env: str | None = None
    password: SecretStr | None = Field(default=None, validate_default=True)
    query: str | None = None
    table: str | None = Field(default=None, validate_default=True)  # "name" or "schema.name"
    batch_size: int = Field(1000, ge=1, le=100_000)  # rows fetched per round trip

    @model_validator(mode="before")
    @classmethod
    def _relative_paths(cls, data: Any, info: ValidationInfo) -> Any:
        data = _anchor(data, info, ("password_file",))
        base = _config_dir(info)
        if base is not None and isinstance(data, dict) and isinstance(data.get("url"), str):
            data = {**data, "url": anchor_sqlite_url(data["url"], base)}
        return data

    @field_validator("url")
    @classmethod
    def _looks_like_url(cls, value: str) -> str:
        if "://" not in value:
            raise ValueError(
                "must be a SQLAlchemy URL such as sqlite:///catalog.db or "
                "postgresql://user@host/dbname"
            )
        return value

    @field_validator("password")
    @classmethod
    def _password(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        _one_secret(value, info, "password", needed=False, why="")
        return value

    @field_validator("table")
    @classmethod
    def _table_or_query(cls, value: str | None, info: ValidationInfo) -> str | None:
        has_query = bool((info.data.get("query") or "").strip())
        if value is not None and not value.strip():
            raise ValueError("must not be empty")
        if value and has_query:
            raise ValueError("give either table or query, not both")
        if not value and not has_query:
            raise ValueError("give table (a table or view name) or query (a SELECT)")
        return value


def anchor_sqlite_url(url: str, base: Path) -> str:
    """``sqlite:///rel.db`` -> ``sqlite:////<base>/rel.db``; other URLs unchanged."""
    scheme, sep, rest = url.partition(":///")
    if not sep or scheme.split("+", 1)[0] != "sqlite":
        return url
    path, q, query = rest.partition("?")
    if not path or path == ":memory:" or path.startswith(("/", "file:")):
        return url
    if Path(path).expanduser().is_absolute():  # "~/x.db"
        return f"{scheme}:///{Path(path).expanduser()}{q}{query}"
    return f"{scheme}:///{(base / path).resolve()}{q}{query}"
