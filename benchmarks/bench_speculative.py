"""Benchmark of speculative decoding on the real server (chapter 11's claims); prints one JSON object.

Starts a private server with `batchlab.course.speculative.VARIANTS` (the decode model's width, d_model
512 / d_ff 2048: speculation off, ngram lookup finished by the bigram prior, the bigram prior alone;
k = 3), runs `spec_rounds` (interleaved rounds at concurrency 1 and 8, server-side TPOT from T_NS)
and prints, per speculative model and concurrency: the median TPOTs, the gain round by round and its
median, and the acceptance figures (α per judged position, the acceptance rate, tokens per step
measured and predicted by (1 − α^(k+1)) / (1 − α), the spread of accepted tokens per step next to
independent acceptance); whether every request got the same tokens with and without speculation;
and the machine's load average before and after.

Usage: python benchmarks/bench_speculative.py [--rounds 5] [--max-tokens 48] [--prompts-per-round 4]
       [--concurrency 1 8]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from batchlab.course.speculative import K, VARIANTS, acceptance, same_tokens, spec_rounds, spec_server, tpot_gain


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print the JSON object (`--concurrency 1 --rounds 1 ...` for a smoke run)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--prompts-per-round", type=int, default=4)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args(argv)
    out: dict = {"load_before": os.getloadavg(), "k": K, "variants": VARIANTS}
    t0 = time.perf_counter()
    with spec_server() as server:
        rows = spec_rounds(server, concurrencies=args.concurrency, rounds=args.rounds, max_tokens=args.max_tokens,
                           prompts_per_round=args.prompts_per_round)
    out["seconds"] = time.perf_counter() - t0
    out["same_tokens"] = same_tokens(rows)
    for model in [m for m in VARIANTS if m != "lm_wide"]:
        out[model] = {"tpot": tpot_gain(rows, model)}
        for c in dict.fromkeys(r["concurrency"] for r in rows):
            mine = [r for r in rows if r["model"] == model and r["concurrency"] == c]
            out[model][f"acceptance_c{c}"] = acceptance([s for r in mine for s in r["steps"]])
            out[model][f"tokens_per_step_all_c{c}"] = [r["tokens_per_step"] for r in mine]
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
