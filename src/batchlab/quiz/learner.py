"""Learner ids: what a valid id is (1–64 letters of any script, digits, `. _ @ -`, single inner
spaces, starting with a letter or digit, so a CSV cell never starts a formula), and the id a
learner's notebooks share: `$BATCHLAB_LEARNER`, else `learner.json` in `$BATCHLAB_CONFIG_DIR`,
`$XDG_CONFIG_HOME/batchlab` or `~/.config/batchlab`.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from batchlab.quiz.safe_json import read_json_file

LEARNER_ENV = "BATCHLAB_LEARNER"
"""Environment variable that names the learner (wins over the remembered file)."""

MAX_LEARNER_CHARS = 64
"""Longest learner id accepted anywhere (grader, widget, config file)."""

_ID = re.compile(r"^[^\W_](?:[\w.@-]| (?! ))*$")


def _short(text: str, limit: int = 24) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")


def check_learner(learner: object) -> str:
    """The learner id, stripped, or ValueError saying in one line what is wrong with it."""
    if not isinstance(learner, str):
        raise ValueError(f"a learner id must be a string, got {type(learner).__name__}")
    s = learner.strip()
    if not s:
        raise ValueError("a learner id must not be empty")
    if len(s) > MAX_LEARNER_CHARS:
        raise ValueError(f"a learner id may have at most {MAX_LEARNER_CHARS} characters, "
                         f"this one has {len(s)} ({_short(s)})")
    if not _ID.match(s) or s.endswith(" "):
        raise ValueError(f"learner id {_short(s)} may only use letters, digits, '.', '_', '@', '-' "
                         "and single spaces, and must start with a letter or digit")
    return s


def learner_file() -> Path:
    """Where the remembered learner id lives (see the module docstring)."""
    env = os.environ.get("BATCHLAB_CONFIG_DIR")
    if env:
        return Path(env) / "learner.json"
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "batchlab" / "learner.json"


def remember_learner(learner: str) -> Path:
    """Check `learner` and store it (atomically, mode 0600) for this user's notebooks; returns the file."""
    s = check_learner(learner)
    path = learner_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".learner-", dir=path.parent)  # created with mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps({"learner": s}, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def forget_learner() -> bool:
    """Remove the remembered id; True if there was one."""
    path = learner_file()
    gone = path.is_file()
    path.unlink(missing_ok=True)
    return gone


def current_learner() -> str | None:
    """The learner id this user's notebooks share: `$BATCHLAB_LEARNER`, else the remembered file,
    else None. An invalid or unreadable value counts as none (the quiz then says so)."""
    env = os.environ.get(LEARNER_ENV, "").strip()
    try:
        if env:
            return check_learner(env)
        data = read_json_file(learner_file(), max_bytes=4096)
        return check_learner(data.get("learner")) if isinstance(data, dict) else None
    except ValueError:
        return None
