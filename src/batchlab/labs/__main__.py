"""`python -m batchlab.labs scores NOTEBOOK...`: the score lines stored in executed labs, summed
(a learner's own view: stored outputs can be edited; grades come from `batchlab.classroom`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from batchlab.labs._core import parse_scores


def notebook_scores(path: Path) -> dict[str, tuple[int, int]]:
    """{qid: (score, max)} from the stored outputs of one executed notebook."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    text = []
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            t = out.get("text", "")
            text.append("".join(t) if isinstance(t, list) else t)
    return parse_scores("\n".join(text))


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    p = argparse.ArgumentParser(prog="python -m batchlab.labs")
    sub = p.add_subparsers(dest="cmd", required=True)
    sc = sub.add_parser("scores", help="collect [score] lines from executed notebooks")
    sc.add_argument("paths", nargs="+", type=Path)
    sc.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    args = p.parse_args(argv)
    result = {}
    for path in args.paths:
        if not path.is_file():
            print(f"error: no notebook at {path}", file=sys.stderr)
            return 2
        try:
            result[str(path)] = notebook_scores(path)
        except (ValueError, OSError) as exc:
            print(f"error: cannot read {path}: {exc}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps({k: {q: list(v) for q, v in s.items()} for k, s in result.items()}, ensure_ascii=False))
        return 0
    for path, scores in result.items():
        got = sum(s for s, _ in scores.values())
        total = sum(m for _, m in scores.values())
        print(f"{path}: {got}/{total}")
        for qid, (s, m) in sorted(scores.items()):
            print(f"  {qid}: {s}/{m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
