"""Where things are: the repository root, the course model repository, the quiz banks, caches."""

from __future__ import annotations

import os
from pathlib import Path

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
