"""Reading JSON files other people wrote without letting one file hang or sink a batch:
`read_json_file` opens without blocking (a FIFO cannot stall it), insists on a regular file, reads
at most a size cap, refuses deep nesting and duplicate keys; each problem is a one-line `ValueError`.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

MAX_SUBMISSION_BYTES = 1 << 20
"""Largest submission file the grader reads (1 MiB; a full bank's answers are a few KiB)."""

MAX_DEPTH = 8
"""Deepest nesting of arrays/objects accepted (a submission needs 2: object → list)."""

_KINDS = [(stat.S_ISDIR, "is a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket")]
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.S)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def display_name(path: str | os.PathLike[str]) -> str:
    """A file name safe to print on one line (control characters escaped)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(path))


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            shown = k if len(k) <= 40 else k[:40] + "…"
            raise _Duplicate(f"duplicate key {shown!r} (JSON keys must be unique)")
        out[k] = v
    return out


def _depth(text: str) -> int:
    depth = deepest = 0
    for m in _TOKENS.finditer(text):
        depth += {"[": 1, "{": 1, "]": -1, "}": -1}.get(m.group(), 0)
        deepest = max(deepest, depth)
    return deepest


def parse_json_text(text: str, max_depth: int = MAX_DEPTH) -> Any:
    """Parse JSON text with the depth limit and duplicate-key check; ValueError with a one-line
    problem otherwise."""
    if _depth(text) > max_depth:
        raise ValueError(f"nested too deeply (more than {max_depth} levels of arrays/objects)")
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except _Duplicate as e:
        raise ValueError(str(e)) from None
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    except (ValueError, RecursionError) as e:  # e.g. an integer with more digits than Python allows
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"not valid JSON: {msg[:120]}") from None


def read_json_file(path: str | os.PathLike[str], max_bytes: int = MAX_SUBMISSION_BYTES,
                   max_depth: int = MAX_DEPTH) -> Any:
    """Read and parse one JSON file defensively (see the module docstring)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(Path(path), flags)
    except FileNotFoundError:
        raise ValueError("no such file") from None
    except OSError as e:
        raise ValueError(f"cannot open: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            what = next((w for test, w in _KINDS if test(st.st_mode)), "")
            raise ValueError(what if what == "is a directory" else
                             "not a regular file" + (f" ({what})" if what else ""))
        if st.st_size > max_bytes:
            raise ValueError(f"too large: {st.st_size:,} bytes (limit {max_bytes:,})")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as e:
        raise ValueError(f"cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ValueError(f"too large: more than {max_bytes:,} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text (byte {e.start})") from None
    return parse_json_text(text, max_depth)
