"""The start of a remote file, read by ``RemoteFileSource.read_start`` over HTTP or SFTP
(``skuferry init``'s sample): the callback that takes it, and what the reading learnt."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# Takes each chunk of a remote file's start; False once it has enough (nothing more is read).
Take = Callable[[bytes], bool]


@dataclass(frozen=True, slots=True)
class Start:
    """What reading the start of a remote file learnt (``RemoteFileSource.read_start``)."""

    received: int  # bytes handed over
    size: int | None  # the whole file's size, when the server said it
    ended: bool  # the file's end was reached: what was handed over is all of it
    ranged: bool  # only what was asked left the server (Range requests honoured, or SFTP)
    content_type: str | None = None  # the answer's Content-Type (HTTP only)
