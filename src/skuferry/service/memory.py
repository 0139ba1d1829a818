"""Memory a finished run freed, handed back to the operating system between runs."""

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


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None)  # the process's own symbols: libc's, on Linux
    except OSError:  # pragma: no cover - platforms without dlopen(NULL)
        return None
