"""A proposal -> the config: its plain data (``config_data``, what the loader validates)
and the commented TOML that writes exactly that data (``render``), every choice
explained beside it and every column left out listed, so the user sees what is not sent.

The API key is never written: the file says where it comes from (``SKUFERRY_API_KEY``).
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from skuferry.discover.model import FieldChoice, Proposal
from skuferry.net.paths import is_remote

SANDBOX_URL = "http://127.0.0.1:8765"
WIDTH = 100

_SOURCE_ORDER = (
    "type", "preset", "url", "path", "headers", "allowed_origins", "allow_insecure_http",
    "ca_bundle", "timeout_s", "sftp_known_hosts", "sftp_key_file", "sftp_password_file",
    "sftp_password_env", "encoding", "delimiter", "final_newline", "sheet",
    "header_row", "record", "items_path", "pagination", "next_path", "total_path",
    "total_pages_path", "skip_if_empty", "where",
)  # fmt: skip


def key_spec(proposal: Proposal) -> Any:
    """The key field's entry in ``[mapping.fields]``."""
    if proposal.key_spec is not None:
        return _short(proposal.key_spec)
    if proposal.key is None:
        return None
    return _short(proposal.key.column.spec())


def _short(spec: Mapping[str, Any]) -> Any:
    """``{"column": X}`` is written ``"X"``."""
    return spec["column"] if set(spec) == {"column"} else dict(spec)


def config_data(proposal: Proposal, *, base_url: str | None, state_path: str) -> dict[str, Any]:
    """The config the proposal stands for, as the TOML file holds it."""
    source = {k: proposal.source[k] for k in _ordered_keys(proposal.source)}
    fields: dict[str, Any] = {}
    key = key_spec(proposal)
    if key is not None:
        fields[proposal.key_field] = key
    for choice in proposal.fields:
        fields[choice.target] = _short(choice.spec)
    mapping: dict[str, Any] = {"key": proposal.key_field, **proposal.mapping}
    mapping["fields"] = fields
    return {
        "api": {"base_url": base_url or SANDBOX_URL},
        "source": source,
        "mapping": mapping,
        "state": {"path": state_path},
    }


def _ordered_keys(table: Mapping[str, Any]) -> list[str]:
    return sorted(table, key=lambda k: _SOURCE_ORDER.index(k) if k in _SOURCE_ORDER else 99)


# --- TOML ------------------------------------------------------------------------------

_BARE = re.compile(r"[A-Za-z0-9_-]+")


def toml_key(name: str) -> str:
    return name if _BARE.fullmatch(name) else _basic(name)


def _basic(text: str) -> str:
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007F")


def toml_value(value: Any) -> str:
    """A value as TOML writes it: strings (literal when they hold double quotes),
    numbers, booleans, arrays and inline tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | Decimal):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        if '"' in value and "'''" not in value and not value.endswith("'") and value.isprintable():
            return f"'''{value}'''"
        return _basic(value)
    if isinstance(value, Sequence):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        inner = ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }"
    raise TypeError(f"no TOML for {type(value).__name__}")


def _comment(text: str, indent: str = "") -> list[str]:
    """``text`` as comment lines; ``indent`` goes after the ``#`` (continuations too)."""
    lines = textwrap.wrap(
        text,
        WIDTH - len(indent) - 2,
        break_long_words=False,
        break_on_hyphens=False,
        subsequent_indent="  " if indent else "",
    )
    return [f"# {indent}{line}" for line in lines] or ["#"]


def _entry(name: str, value: Any, comment: str = "") -> list[str]:
    line = f"{toml_key(name)} = {toml_value(value)}"
    if not comment:
        return [line]
    if len(line) + len(comment) + 5 <= WIDTH:
        return [f"{line}   # {comment}"]
    return [*_comment(comment), line]


def render(
    proposal: Proposal,
    *,
    base_url: str | None,
    state_path: str,
    origin: str,
    read: str,
    command: str,
) -> str:
    """The commented TOML of ``config_data(proposal, ...)``.

    ``origin``: what was read (for the header); ``read``: how much of it; ``command``:
    the command line that proposed it.
    """
    data = config_data(proposal, base_url=base_url, state_path=state_path)
    out: list[str] = []
    out += _comment(f"Proposed by `{command}` from {origin}.")
    out += _comment(read)
    out.append("#")
    out.append("# Found, and how sure:")
    for finding in proposal.findings:
        out += _comment(f"{finding.subject}: {finding.value} ({finding.sure}: {finding.why})", "  ")
    said = [q.text for q in proposal.questions]
    if said:
        out.append("#")
        out.append("# Not decided, check these:")
        for text in said:
            out += _comment(f"- {text}", "  ")
    if proposal.notes:
        out.append("#")
        out.append("# Notes:")
        for note in proposal.notes:
            out += _comment(f"- {note}", "  ")
    out.append("")
    out.append("[api]")
    if base_url:
        out += _entry("base_url", data["api"]["base_url"])
    else:
        out += _entry(
            "base_url",
            data["api"]["base_url"],
            "the local sandbox (`skuferry sandbox`); init --base-url URL for your CMS",
        )
    out += _comment(
        "The API key comes from the environment, SKUFERRY_API_KEY (sandbox-key for the "
        "sandbox), or from api_key_file (a 0600 file); it is never written here."
    )
    out.append("")
    out.append("[source]")
    for name, value in data["source"].items():
        out += _entry(name, value, _source_comment(name, value))
    out.append("")
    out.append("[mapping]")
    out += _entry(
        "key", data["mapping"]["key"], "the field that identifies a product on both sides"
    )
    for name in ("group_by", "inherit", "each"):
        if name in data["mapping"]:
            out += _entry(name, data["mapping"][name])
    out.append("")
    out.append("[mapping.fields]")
    if proposal.key is not None:
        out += _entry(
            proposal.key_field,
            data["mapping"]["fields"][proposal.key_field],
            _why(proposal.key.why),
        )
    for choice in proposal.fields:
        out += _entry(
            choice.target, data["mapping"]["fields"][choice.target], _field_comment(choice)
        )
    if proposal.unmapped:
        out.append("# Not mapped (add a line above to send one):")
        for name, what in proposal.unmapped:
            out += _comment(f"  {name!r}: {what}")
    out.append("")
    out.append("[state]")
    out += _entry(
        "path", data["state"]["path"], "what was sent, and the runs (relative to this file)"
    )
    return "\n".join(out) + "\n"


def _why(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


def _field_comment(choice: FieldChoice) -> str:
    return choice.why


_SOURCE_COMMENTS = {
    "path": "relative to this file's folder",
    "final_newline": "the file ends without a line break (no torn export: the sample is whole)",
    "skip_if_empty": "rows without one carry no product: skipped, not refused",
    "where": "only the rows this holds for are read",
}


def _source_comment(name: str, value: Any) -> str:
    if name == "path" and is_remote(value):
        return "a remote file, downloaded whole by each sync"
    return _SOURCE_COMMENTS.get(name, "")


def summary(proposal: Proposal) -> list[str]:
    """The proposal as ``init`` prints it: what was found, the key, the fields, the rest."""
    out = ["What was found, and how sure:"]
    for finding in proposal.findings:
        if finding.subject == "key":
            continue  # said below, with the runner-up
        out.append(f"  {finding.subject}: {finding.value} ({finding.sure}: {finding.why})")
    out.append("")
    if proposal.key is not None:
        key = proposal.key
        out.append(f"The key: {key.column.name!r} -> {proposal.key_field} ({key.why})")
        others = [c for c in proposal.candidates if c.column.name != key.column.name]
        if others:
            out.append(f"  runner-up: {others[0].column.name!r} ({others[0].why})")
    out.append("The fields:")
    for choice in proposal.fields:
        where = choice.source_name or choice.spec.get("path", "")
        typed = {k: v for k, v in choice.spec.items() if k not in ("column", "path")}
        shown = f" {toml_value(typed)}" if typed else ""
        why = choice.why or "as its worked example maps it"
        out.append(f"  {choice.target} <- {where!r}{shown} ({why})")
    if proposal.unmapped:
        out.append("Not mapped:")
        out += [f"  {name!r}: {what}" for name, what in proposal.unmapped]
    if proposal.questions:
        out.append("Not decided:")
        out += [f"  - {q.text}" for q in proposal.questions]
    if proposal.notes:
        out.append("Notes:")
        out += [f"  - {note}" for note in proposal.notes]
    return out
