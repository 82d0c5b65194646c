"""Threads of numpy's bundled OpenBLAS, settable after numpy is imported (as in Triton's
Python-backend stub, where `OPENBLAS_NUM_THREADS` comes too late).
"""

from __future__ import annotations

import ctypes
import glob
import os
from functools import lru_cache

import numpy as np

from batchlab._validate import count


@lru_cache(maxsize=1)
def _openblas():
    libs = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    for path in sorted(glob.glob(os.path.join(libs, "libopenblas*.so*"))):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for suffix in ("64_", "_64_", ""):
            setter = getattr(lib, "openblas_set_num_threads" + suffix, None)
            getter = getattr(lib, "openblas_get_num_threads" + suffix, None)
            if setter is not None and getter is not None:
                setter.argtypes = [ctypes.c_int]
                getter.restype = ctypes.c_int
                return setter, getter
    return None


def set_num_threads(n: int) -> bool:
    """Set OpenBLAS's thread count; False when numpy's OpenBLAS cannot be found."""
    count("thread count", n)
    funcs = _openblas()
    if funcs is None:
        return False
    funcs[0](n)
    return True


def get_num_threads() -> int | None:
    """OpenBLAS's current thread count, or None when it cannot be found."""
    funcs = _openblas()
    return None if funcs is None else int(funcs[1]())
