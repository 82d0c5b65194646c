"""Argument checks shared by the library (each failure is one clear ``ValueError``) and the
command lines' parser (a usage error is one line)."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any, NoReturn

import numpy as np


def rng_of(seed: int | np.random.Generator | None) -> np.random.Generator:
    """Return a ``numpy.random.Generator`` from a seed, a generator or ``None``."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise ValueError(f"seed must be a non-negative integer or a numpy Generator, got {seed!r}")
    return np.random.default_rng(seed)


def positive(name: str, value: Any) -> float:
    """``value`` as a finite float > 0."""
    v = real(name, value)
    if not v > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return v


def non_negative(name: str, value: Any) -> float:
    """``value`` as a finite float >= 0."""
    v = real(name, value)
    if v < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return v


def real(name: str, value: Any) -> float:
    """``value`` as a finite float."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return v


def integer(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as an int in ``[lo, hi]`` (bounds optional); floats with a fraction are refused."""
    whole = isinstance(value, (float, np.floating)) and float(value).is_integer()
    if isinstance(value, bool) or not (isinstance(value, (int, np.integer)) or whole):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    v = int(value)
    if lo is not None and v < lo:
        raise ValueError(f"{name} must be >= {lo}, got {v}")
    if hi is not None and v > hi:
        raise ValueError(f"{name} must be <= {hi}, got {v}")
    return v


def count(name: str, value: Any, lo: int = 1, message: str | None = None) -> int:
    """``value`` as an int >= ``lo`` (a count, size or seed; bools and floats refused); ``message``
    replaces the default error text."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        what = "a non-negative integer" if lo == 0 else f"an integer >= {lo}"
        raise ValueError(message or f"{name} must be {what}, got {value!r}")
    return int(value)


def optional_count(name: str, value: Any, lo: int = 1) -> int | None:
    """``None``, or ``value`` checked by `count`."""
    return None if value is None else count(name, value, lo)


def fraction(name: str, value: Any) -> float:
    """``value`` as a finite float in [0, 1) (e.g. the warm-up share of requests left out)."""
    v = real(name, value)
    if not 0.0 <= v < 1.0:
        raise ValueError(f"{name} must be a fraction in [0, 1), got {value!r}")
    return v


def times_array(name: str, values: Any, *, sorted_required: bool = True) -> np.ndarray:
    """A 1-D float64 array of finite times (seconds), optionally required to be non-decreasing."""
    try:
        a = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a 1-D sequence of numbers") from None
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if a.size and not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite (found NaN or inf)")
    if sorted_required and a.size > 1 and np.any(np.diff(a) < 0):
        raise ValueError(f"{name} must be sorted in non-decreasing order")
    return a


def int_array(name: str, values: Any, n: int, lo: int = 1) -> np.ndarray:
    """A 1-D int64 array of length ``n`` with every value >= ``lo``."""
    a = np.asarray(values)
    if a.ndim != 1 or a.shape[0] != n:
        raise ValueError(f"{name} must be 1-D with {n} entries, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        if not np.issubdtype(a.dtype, np.floating) or not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
            raise ValueError(f"{name} must hold integers")
    a = a.astype(np.int64)
    if a.size and a.min() < lo:
        raise ValueError(f"{name} must be >= {lo} everywhere, found {int(a.min())}")
    return a


def choice(name: str, value: Any, options: tuple[str, ...]) -> str:
    """``value`` upper/lower-normalised and checked against ``options``."""
    if isinstance(value, str):
        for o in options:
            if value.lower() == o.lower():
                return o
    raise ValueError(f"{name} must be one of {', '.join(options)}, got {value!r}")


class CliParser(argparse.ArgumentParser):
    """argparse whose usage error is one line on stderr (no usage block) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)
