"""Where a secret is read from, and what makes a load refuse a config's secrets: one home
for both the loader and the quick lane, without pydantic.

The loader applies these rules to the validated settings, the quick lane to the raw
reading (to know that the load would refuse the config, and so not skip its run): the
same rules in the same words, so the lane cannot drift from the loader.

- A secret comes from the first place given: a variable, else a file (``find_secret``).
- A file holding a secret that every user of the machine may read is refused, as ssh
  refuses such a key (``secret_file_problem``).
- A source secret's ``<key>_env`` must name a set variable and its ``<key>_file`` must
  be readable (``source_secret_problems``).

No message holds a secret's value.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from skuferry import files, logs
from skuferry.redact import SOURCE_SECRET_KEYS

# Keys whose value is the path of a file holding a secret, in any table; whether such a
# file is there, readable, empty or readable by everyone decides whether a config loads.
SECRET_FILE_KEYS = (
    "api_key_file",
    "api_keys_file",
    "token_file",
    "password_file",
    "client_secret_file",
    "sftp_key_file",
    "sftp_password_file",
    "hook_secret_file",
    "console_token_file",
)

Places = tuple[str | None, str | None, Sequence[tuple[str, Path]]]  # variable, where, files


def read_secret_file(path: Path) -> tuple[str, str]:
    """(the file's text stripped, "") or ("", the problem); files usually end with a newline.

    The one reader of a secret file. A file is opened once while it stays as it was: the
    load checks a source's token, the source then uses it, and both get one reading (a
    full start used to open each secret file up to four times). A file rewritten since
    (a rotated token: another inode, size or change time) is read again.
    """
    place = path.expanduser()
    try:
        seen = _signature(place)
        with _READ_LOCK:
            kept = _READ.get(place)
        if kept is not None and kept[0] == seen:
            return kept[1], ""
        text = place.read_text(encoding="utf-8").strip()
    except OSError as exc:
        return "", f"cannot read '{path}': {exc.strerror or exc}"
    except UnicodeDecodeError:
        return "", f"'{path}' is not UTF-8 text"
    if not text:
        return "", f"'{path}' is empty"
    with _READ_LOCK:
        _READ[place] = (seen, text)
    return text, ""


# Each secret file's text as last read, under the signature it had (read_secret_file).
_READ: dict[Path, tuple[tuple[int, ...], str]] = {}
_READ_LOCK = threading.Lock()


def _signature(path: Path) -> tuple[int, ...]:
    found = path.stat()
    return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)


def find_secret(
    env_var: str | None,
    env_where: str | None,
    files_: Sequence[tuple[str, Path]],
    env: Mapping[str, str],
) -> tuple[str | None, list[str]]:
    """A secret from the first place given: the variable ``env_var``, else the first of
    ``files_`` ((where, path)); (None, []) when none is given (the inline value decides).
    ``env_where`` set: the variable must be set. Found secrets are masked in every log."""
    if env_var is not None:
        value = env.get(env_var, "").strip()
        if value:
            logs.add_secrets([value])
            return value, []
        if env_where is not None:
            problem = f"environment variable {env_var} is not set or empty"
            return None, [f"{env_where}: {problem}"]
    for where, path in files_:
        text, problem = read_secret_file(path)
        if problem:
            return None, [f"{where}: {problem}"]
        logs.add_secrets([text])
        return text, []
    return None, []


def source_places(*, key: str, file: Path | None, env_name: str | None, table: str) -> Places:
    """Where a secret ``key`` (``token``...) of ``[table]`` comes from, as it names them."""
    files_ = () if file is None else ((f"at '{table}.{key}_file'", file),)
    return env_name, f"at '{table}.{key}_env'", files_


def source_secret_problems(value: Callable[[str], Any], env: Mapping[str, str]) -> list[str]:
    """Read every secret the ``[source]`` table points at, keep the problems. ``value(name)``
    is the table's value of a key (None: not set; a ``*_file``: its anchored path)."""
    problems: list[str] = []
    for key in SOURCE_SECRET_KEYS:
        inline, file, env_name = (value(name) for name in (key, f"{key}_file", f"{key}_env"))
        if inline is None and file is None and env_name is None:
            continue
        places = source_places(key=key, file=file, env_name=env_name, table="source")
        problems.extend(find_secret(*places, env)[1])
    return problems


def secret_file_problem(path: Path) -> str | None:
    """Why a file holding a secret may not be used (every user may read it), or None.

    For every ``*_file`` secret, the keys file included: call it where the file is read.
    Its mode first: a file that not everyone may read is not opened here, so a load reads
    each secret once, where it uses it.
    """
    if not files.world_readable(path):  # a file not there: its reader says why
        return None
    try:
        with path.open("rb") as f:  # an empty or unreadable file holds nothing to leak
            holds_something = bool(f.read(4096).strip())
    except OSError:
        return None  # the code that reads it reports why it cannot
    if not holds_something:
        return None
    return (
        f"'{path}' holds a secret and every user of this machine may read it "
        f"(mode {files.mode_text(path)}); run: chmod 600 {path}"
    )


def secret_file_problems(found: Iterable[tuple[str, str, Path]]) -> list[str]:
    """``at 'table.key': ...`` for each (table, key, path) of a secret file refused."""
    problems = []
    for table, key, path in found:
        problem = secret_file_problem(path)
        if problem:
            problems.append(f"at '{table}.{key}': {problem}")
    return problems
