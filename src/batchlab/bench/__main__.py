"""`python -m batchlab.bench dynamic|continuous|fidelity|client`: one JSON object on stdout.

Progress goes to stderr. Each benchmark starts its own embedded server on 127.0.0.1 (only the
models it needs) unless TRITON_URL names one; each takes a few minutes.
Errors: one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from batchlab._validate import CliParser
from batchlab.bench import client, continuous, dynamic, fidelity
from batchlab.bench.common import BenchError, emit

BENCHES = ("dynamic", "continuous", "fidelity", "client")


def _parser() -> argparse.ArgumentParser:
    p = CliParser(prog="python -m batchlab.bench", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="bench", metavar="{" + ",".join(BENCHES) + "}", parser_class=CliParser)
    d = sub.add_parser("dynamic", help="decode and embed: no batching vs dynamic batching (embed: + delay, preferred)")
    d.add_argument("--concurrency", type=int, default=16)
    d.add_argument("--rounds", type=int, default=3)
    d.add_argument("--round-s", type=float, default=4.0)
    d.add_argument("--extra", action="store_true", help="also run embed with 2 instances")
    c = sub.add_parser("continuous", help="generate vs lm_iterative / lm_stream, interleaved rounds (chat-trace lengths)")
    c.add_argument("--rounds", type=int, default=7)
    c.add_argument("--requests", type=int, default=96, help="requests per way per round")
    c.add_argument("--concurrency", type=int, default=8)
    c.add_argument("--scale", type=float, default=8.0, help="divide the chat trace's output lengths by this")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--lm-step", action="store_true", help="also run lm_step (the slowest way)")
    c.add_argument("--lm", choices=continuous.LMS, default="decode",
                   help="decode: every way on the decode model's wider LM (default); default: the course's models")
    f = sub.add_parser("fidelity", help="simulator predictions vs measurements (each load measured twice): "
                                        "embed (dynamic batcher) and lm_stream (continuous batching)")
    f.add_argument("--level-s", type=float, default=8.0, help="seconds of each embed load (run twice)")
    f.add_argument("--lm-level-s", type=float, default=30.0, help="seconds of each lm_stream load (run twice)")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--rounds", type=int, default=fidelity.ROUNDS, help="segments per load, each run A and B")
    f.add_argument("--no-continuous", action="store_true", help="skip the lm_stream part")
    k = sub.add_parser("client", help="the load generator's own capacity on one core (noop model)")
    k.add_argument("--duration-s", type=float, default=5.0)
    k.add_argument("--lab-max-rate", type=float, default=None)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run one benchmark; print its JSON object."""
    p = _parser()
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.bench is None:
        print(f"error: name a benchmark: {', '.join(BENCHES)}", file=sys.stderr)
        return 2
    try:
        for name in ("concurrency", "rounds", "requests"):
            if getattr(args, name, 1) is not None and getattr(args, name, 1) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
        for name in ("round_s", "level_s", "lm_level_s", "duration_s", "scale", "lab_max_rate"):
            v = getattr(args, name, None)
            if v is not None and not v > 0:
                raise ValueError(f"--{name.replace('_', '-')} must be > 0")
        if args.bench == "dynamic":
            result = dynamic.run(concurrency=args.concurrency, rounds=args.rounds, round_s=args.round_s,
                         extra=args.extra)
        elif args.bench == "continuous":
            result = continuous.run(rounds=args.rounds, n_requests=args.requests, concurrency=args.concurrency,
                                    scale=args.scale, seed=args.seed, with_lm_step=args.lm_step,
                                    lm=args.lm)
        elif args.bench == "fidelity":
            result = fidelity.run(level_s=args.level_s, lm_level_s=args.lm_level_s, rounds=args.rounds,
                                  seed=args.seed, continuous=not args.no_continuous)
        else:
            result = client.run(duration_s=args.duration_s, lab_max_rate=args.lab_max_rate or client.LAB_MAX_RATE_RPS)
    except (BenchError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the server went away mid-run (connection refused / reset): one line, not a traceback
        print(f"error: lost the server during the run: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 2
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
