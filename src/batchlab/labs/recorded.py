"""The data the labs replay, recorded from the real server (``labs/data/NAME.json``): the header
every recording carries, reading it, and the command line that re-records it."""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from batchlab.server import connect

FORMAT = 1
DATA_DIR = Path(__file__).resolve().parent / "data"


def header(model: str, repeats: int) -> dict[str, Any]:
    """The fields every recording starts with."""
    return {"format": FORMAT, "model": model, "recorded": time.strftime("%Y-%m-%d"), "repeats": repeats}


@functools.lru_cache(maxsize=None)
def load(name: str) -> dict[str, Any]:
    """Recording ``name`` (e.g. "lab2_batches"), read once; ValueError if it is not of `FORMAT`."""
    path = DATA_DIR / f"{name}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: not lab replay data of format {FORMAT}")
    return data


def main(argv: Sequence[str] | None, doc: str, name: str, model: str, count: int,
         record: Callable[..., dict[str, Any]], summary: Callable[[dict[str, Any]], str], repeats: int = 3) -> int:
    """Re-record ``name``: start a server with ``model``, call ``record(server, repeats, seed, count)``,
    write the JSON and print ``summary(data)``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=repeats, help="recordings of each case")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random cases")
    ap.add_argument("--count", type=int, default=count, help="random cases drawn")
    ap.add_argument("--out", type=Path, default=DATA_DIR / f"{name}.json")
    args = ap.parse_args(argv)
    with connect(models=[model], private=True) as server:
        data = record(server, args.repeats, args.seed, args.count)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{summary(data)} -> {args.out}")
    return 0
