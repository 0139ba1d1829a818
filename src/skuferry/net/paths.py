"""Is this source path a remote file? The one rule, for the config, the loader and the service.

A file source's ``path`` is a local file or the URL of a remote file. It is a URL
when it starts with a scheme and ``://`` (``https://``, ``sftp://``, ``file://``):
a scheme is a letter followed by letters, digits, ``+``, ``-`` or ``.``, at least
two characters long, so a Windows drive (``C:\\export.csv``, ``C:/export.csv``,
even ``C://export.csv``) is a local path. Of the URLs, ``http``, ``https`` and
``sftp`` are remote files skuferry downloads; any other scheme (``file://``,
``ftp://``) is refused by the settings with a message that names the three.

Pure functions on text: nothing is opened or resolved here.
"""

from __future__ import annotations

import os
import re

REMOTE_SCHEMES = ("http", "https", "sftp")

_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]+)://")


def url_scheme(path: str | os.PathLike[str] | None) -> str | None:
    """The lower-cased scheme when ``path`` is a URL (``https``, ``file``...), else None.

    A ``Path`` is never a URL (pathlib folds the ``//`` of one anyway).
    """
    if not isinstance(path, str):
        return None
    found = _URL.match(path)
    return found.group(1).lower() if found else None


def remote_scheme(path: str | os.PathLike[str] | None) -> str | None:
    """``http``, ``https`` or ``sftp`` when ``path`` names a remote file, else None."""
    scheme = url_scheme(path)
    return scheme if scheme in REMOTE_SCHEMES else None


def is_remote(path: str | os.PathLike[str] | None) -> bool:
    """True when ``path`` names a remote file (an http, https or sftp URL)."""
    return remote_scheme(path) is not None
