"""Memory a finished run held, let go and handed back to the operating system between runs.

A daemon keeps its last run's outcome (for ``/healthz``, the board, the page). An outcome
that failed carries the exception, and an exception's traceback holds every frame of the
run it unwound: its rows, its plan, its client, alive until the next run. ``forget_frames``
lets them go once the failure has been logged; ``release_memory`` then hands back what
the run freed.
"""

from __future__ import annotations

import ctypes
import functools
import gc


def release_memory() -> bool:
    """Hand the memory a finished run freed back to the operating system; False if unsupported.

    A run over a large catalog allocates tens of MiB (rows, fingerprints, the plan) and
    frees them when it ends, but glibc keeps freed memory mapped for reuse, so a daemon
    would sit between runs nearer its last run's peak. ``malloc_trim(0)`` returns glibc's
    free pages (about 5 MiB after a 100,000-product run). Python's own small-object
    allocator keeps an arena while one object in it lives: with ``PYTHONMALLOC=malloc``
    the trim reaches those too (13 MiB more), at the price of a few MiB more at the peak
    and some CPU; the density bench measures both, the Kubernetes guide weighs them.
    glibc only: elsewhere this does nothing.
    """
    gc.collect()  # cycles left by the run, so that their memory is free to trim
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is None:
        return False
    trim(0)
    return True


def forget_frames(exc: BaseException) -> None:
    """Drop the tracebacks of ``exc`` and of its causes: the run's frames are freed; the
    exception's class and message (what the outcome reports) stay."""
    seen: set[int] = set()
    found: BaseException | None = exc
    while found is not None and id(found) not in seen:
        seen.add(id(found))
        found.__traceback__ = None
        found = found.__cause__ or found.__context__


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None)  # the process's own symbols: libc's, on Linux
    except OSError:  # pragma: no cover - platforms without dlopen(NULL)
        return None
