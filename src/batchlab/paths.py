"""Where things are: the repository root, the course model repository, the quiz banks, caches."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parent
"""The installed `batchlab` package folder."""

MODEL_REPOSITORY = PACKAGE_DIR / "model_repository"
"""The course's Triton model repository (Python-backend models, one `config.pbtxt` each)."""


def repo_root() -> Path:
    """The course repository's root (holding `pyproject.toml` and `quiz/`): `BATCHLAB_ROOT`, else
    searched above the package, then from the current directory up."""
    env = os.environ.get("BATCHLAB_ROOT")
    if env:
        return Path(env).resolve()
    for start in (PACKAGE_DIR, Path.cwd().resolve()):
        for cand in (start, *start.parents):
            if (cand / "pyproject.toml").is_file() and (cand / "quiz").is_dir():
                return cand
    raise FileNotFoundError(
        "cannot find the batchlab repository root (a folder with pyproject.toml and quiz/); "
        "set BATCHLAB_ROOT"
    )


def cache_dir() -> Path:
    """The course's cache folder (`BATCHLAB_CACHE`, else `$XDG_CACHE_HOME/batchlab`, else ~/.cache)."""
    env = os.environ.get("BATCHLAB_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "batchlab"


class NotebookError(ValueError):
    """A file that is not a readable nbformat-4 notebook (the message names the file and why, in one line)."""


def read_notebook(path: str | os.PathLike[str], max_bytes: int | None = None) -> dict[str, Any]:
    """A notebook file as a plain dict (the course's one notebook reader); NotebookError when it is larger
    than `max_bytes`, unreadable, not JSON or not nbformat 4."""
    path = Path(path)
    try:
        if max_bytes is not None and path.stat().st_size > max_bytes:
            raise NotebookError(f"{path}: larger than {max_bytes // 2 ** 20} MiB")
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise NotebookError(f"{path}: cannot be read ({type(exc).__name__})") from None
    except json.JSONDecodeError as exc:
        raise NotebookError(f"{path}: not a notebook (JSON error at line {exc.lineno})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list) or nb.get("nbformat") != 4:
        raise NotebookError(f"{path}: not an nbformat 4 notebook")
    return nb
