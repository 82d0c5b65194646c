"""What a chapter printed when it was last executed. An exercise that must use a chapter's measured
values (a calibration, a table) reads them from the chapter's stored outputs, so its answer cannot
drift from what the chapter shows."""

from __future__ import annotations

import re
from pathlib import Path

from batchlab.paths import read_notebook, repo_root

_NUMBER = r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"


def chapter_output(notebook: str, marker: str, notebooks_dir: Path | None = None) -> str:
    """The text that the first code cell of `notebook` (in the course's notebooks/) whose source
    contains `marker` printed, as stored in the notebook; ValueError when there is no such cell or it
    has no stored text output (run the chapter first)."""
    path = (notebooks_dir or repo_root() / "notebooks") / notebook
    if not path.is_file():
        raise ValueError(f"no chapter notebook {path}")
    for cell in read_notebook(path)["cells"]:
        if cell["cell_type"] == "code" and marker in "".join(cell["source"]):
            text = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))
            if not text.strip():
                raise ValueError(f"{notebook}: the cell with {marker!r} has no stored output: execute the chapter")
            return text
    raise ValueError(f"{notebook} has no code cell containing {marker!r}")


def keyword_numbers(text: str, name: str) -> dict[str, float]:
    """The `key=number` pairs of the first `name(...)` in `text` (a printed dataclass such as
    `TokenCost(prefill_per_token=145.6, ...)`); ValueError when `text` shows none."""
    m = re.search(rf"{re.escape(name)}\(([^)]*)\)", text)
    if m is None:
        raise ValueError(f"no {name}(...) in the text")
    return {k: float(v) for k, v in re.findall(rf"(\w+)=({_NUMBER})", m.group(1))}


def table_rows(text: str, columns: int) -> list[list[float]]:
    """The rows of a printed table: each line that starts with at least `columns` numbers (units such
    as `ms` between them are skipped), as its first `columns` numbers."""
    rows = []
    for line in text.splitlines():
        cells = re.findall(rf"(?<![\w.]){_NUMBER}(?![\w.])", re.sub(r"\b(ms|µs|s)\b", " ", line))
        head = re.match(rf"\s*{_NUMBER}", line)
        if head and len(cells) >= columns:
            rows.append([float(c) for c in cells[:columns]])
    return rows
