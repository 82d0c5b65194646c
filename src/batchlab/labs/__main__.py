"""`python -m batchlab.labs scores NOTEBOOK... [--json]`: the score lines stored in executed labs, summed
(a learner's own view: stored outputs can be edited; grades come from `batchlab.classroom`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from batchlab.labs._core import parse_scores
from batchlab.paths import read_notebook


def notebook_scores(path: Path) -> dict[str, tuple[int, int]]:
    """{qid: (score, max)} from the stored outputs of one executed notebook."""
    nb = read_notebook(path)
    return parse_scores("\n".join("".join(out.get("text", "")) for cell in nb.get("cells", [])
                                  for out in cell.get("outputs", [])))


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    p = argparse.ArgumentParser(prog="python -m batchlab.labs")
    sc = p.add_subparsers(dest="cmd", required=True).add_parser("scores", help="collect [score] lines from executed notebooks")
    sc.add_argument("paths", nargs="+", type=Path)
    sc.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    args = p.parse_args(argv)
    result = {}
    for path in args.paths:
        try:
            result[str(path)] = notebook_scores(path)
        except (ValueError, OSError) as exc:
            print(f"error: {'no notebook at ' + str(path) if not path.is_file() else f'cannot read {path}: {exc}'}",
                  file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps({k: {q: list(v) for q, v in s.items()} for k, s in result.items()}, ensure_ascii=False))
    for path, scores in result.items() if not args.json else ():
        print(f"{path}: {sum(s for s, _ in scores.values())}/{sum(m for _, m in scores.values())}")
        for qid, (s, m) in sorted(scores.items()):
            print(f"  {qid}: {s}/{m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
