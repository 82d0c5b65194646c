"""Command line: ``python -m batchlab.sim dynamic ...`` prints one JSON summary; ``seed-demo`` runs the article's demo.

Bad arguments print one line to stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from batchlab._validate import CliParser
from batchlab.course.seed_demo import main as demo

from . import workload
from .dynamic import simulate_dynamic
from .service import Affine

MAX_REQUESTS = 5_000_000


def _int_list(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals:
        raise argparse.ArgumentTypeError("expected at least one size")
    return vals


def build_parser() -> argparse.ArgumentParser:
    """The CLI's argument parser."""
    p = CliParser(prog="python -m batchlab.sim", description="Event-driven simulator of Triton's batchers.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=CliParser)
    d = sub.add_parser("dynamic", help="Triton's dynamic batcher on Poisson (or constant-rate) arrivals")
    d.add_argument("--rate", type=float, required=True, help="arrival rate, requests per second")
    d.add_argument("--max-batch-size", type=int, required=True)
    d.add_argument("--max-queue-delay-us", type=float, default=0.0)
    d.add_argument("--base-us", type=float, required=True, help="fixed time per execution (us)")
    d.add_argument("--per-item-us", type=float, required=True, help="time per batch element (us)")
    d.add_argument("--preferred", type=_int_list, default=[], help="preferred batch sizes, e.g. 4,8")
    d.add_argument("--instances", type=int, default=1)
    d.add_argument("--requests", type=int, default=200_000)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--arrivals", choices=("poisson", "constant"), default="poisson")
    d.add_argument("--max-queue-size", type=int, default=0)
    d.add_argument("--timeout-us", type=float, default=0.0, help="default_timeout_microseconds")
    d.add_argument("--timeout-action", choices=("REJECT", "DELAY"), default="REJECT")
    d.add_argument("--warmup", type=float, default=0.1, help="fraction of requests left out of the summary")
    sub.add_parser("seed-demo", help="run the source article's tick-based demo as printed")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.cmd == "seed-demo":
        demo()
        return 0
    try:
        if not 1 <= args.requests <= MAX_REQUESTS:
            raise ValueError(f"--requests must be in [1, {MAX_REQUESTS}], got {args.requests}")
        if args.seed < 0:
            raise ValueError(f"--seed must be >= 0, got {args.seed}")
        if args.arrivals == "poisson":
            arr = workload.poisson(args.rate, args.requests, seed=args.seed)
        else:
            arr = workload.constant(args.rate, args.requests)
        res = simulate_dynamic(
            arr, Affine(args.base_us, args.per_item_us), args.max_batch_size,
            max_queue_delay_us=args.max_queue_delay_us, preferred_batch_sizes=args.preferred,
            instances=args.instances, max_queue_size=args.max_queue_size,
            default_timeout_us=args.timeout_us, timeout_action=args.timeout_action, warmup=args.warmup,
        )
        out = res.summary()
    except ValueError as e:
        print(f"python -m batchlab.sim: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
