"""Cheap change tokens for sources (``Source.change_token``): is a catalog what it was?

A local file's token is its ``stat()``: size, mtime and ctime in nanoseconds, inode
and device. An edit in place moves mtime and ctime, a replacement (write then
rename) changes the inode, and ``touch`` alone moves mtime: then the file is read
again and, its rows being what they were, nothing is written.

A file changed less than ``RACY_S`` ago gets no token (unknown, read every time):
a second write within the same timestamp tick, after this ``stat()`` but with the
same size, would otherwise look like no change (git calls this "racy").
"""

from __future__ import annotations

import time
from pathlib import Path

RACY_S = 2.0  # a file younger than this is read, whatever its stat says


def file_change_token(path: Path, *, now_ns: int | None = None) -> str | None:
    """``file:size:mtime_ns:ctime_ns:inode:device``; None when the file is missing or fresh."""
    try:
        st = Path(path).stat()
    except OSError:
        return None  # the read will say what is wrong with it
    now = time.time_ns() if now_ns is None else now_ns
    if now - max(st.st_mtime_ns, st.st_ctime_ns) < RACY_S * 1e9:
        return None
    return f"file:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}:{st.st_dev}"
