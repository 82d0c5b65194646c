"""Benchmark: simulated requests per second of batchlab.sim's dynamic batcher, and the ratio to SimPy.

Not a test: it prints figures. Each configuration runs the fast engine on ``--requests`` Poisson
arrivals (median of ``--repeat`` runs, records included, summary timed apart), the general event
engine and the independent SimPy model (tests/simpy_dynamic.py) on the first ``--simpy-requests``
of the same arrivals, and checks the three agree on mean latency. Goals: >= 1 M simulated
requests/s for the dynamic batcher (issue #31; #3 asked 300k), >= 10x the SimPy model.

Both engines take every decision from `batchlab.sim.rule.next_batch`. The event engine asks it at
every decision; the fast engine asks it once per queue length before the run
(`sends_by_queue_length`, timed as "lookup ms") and looks the answers up: "fast/events" is what
asking at every decision would cost.

    python benchmarks/bench_sim.py [--requests 1000000] [--simpy-requests 100000] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import simpy_dynamic  # noqa: E402

from batchlab.sim import workload  # noqa: E402
from batchlab.sim.dynamic import sends_by_queue_length, simulate_dynamic  # noqa: E402
from batchlab.sim.rule import BatchRule  # noqa: E402
from batchlab.sim.service import Affine  # noqa: E402

CONFIGS = [
    # name, rate (req/s), max_batch_size, delay (us), preferred, instances, base (us), per item (us)
    ("M/D/1: max_batch 1, delay 0, rho 0.7", 1750.0, 1, 0, (), 1, 0.0, 400.0),
    ("max_batch 8, delay 500 us", 4000.0, 8, 500, (), 1, 300.0, 100.0),
    ("max_batch 16, preferred 4,8, delay 200 us, 2 instances", 8000.0, 16, 200, (4, 8), 2, 300.0, 100.0),
    ("max_batch 32, delay 2 ms, heavy load", 20000.0, 32, 2000, (), 1, 1000.0, 20.0),
    ("max_batch 8, delay 0, 4 instances", 12000.0, 8, 0, (), 4, 500.0, 50.0),
]


def timed(fn, repeat: int) -> tuple[float, object]:
    """Median wall time of ``repeat`` calls, and the last result."""
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> int:
    """Run every configuration and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--simpy-requests", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args(argv)
    rows = []
    for name, rate, m, d, pref, k, base, per in CONFIGS:
        a = workload.poisson(rate, args.requests, seed=42)
        svc = Affine(base, per)
        t_fast, res = timed(lambda: simulate_dynamic(a, svc, m, d, pref, k), args.repeat)
        t_sum, summ = timed(lambda: res.summary(), 1)
        small = a[: args.simpy_requests]
        t_ev, ev = timed(lambda: simulate_dynamic(small, svc, m, d, pref, k, engine="events"), 1)
        t_lookup, _ = timed(lambda: sends_by_queue_length(BatchRule(m, pref, d)), args.repeat)
        t_sp, (_, sp_finish) = timed(lambda: simpy_dynamic.simulate(small, base, per, m, d, pref, k), 1)
        fast_small = simulate_dynamic(small, svc, m, d, pref, k)
        lat = [float(np.mean(x - small)) for x in (fast_small.records["finish"], ev.records["finish"], sp_finish)]
        rows.append(dict(
            config=name, requests=args.requests, batch_size_mean=summ["batch_size_mean"], rho=summ["rho"],
            fast_rps=args.requests / t_fast, summary_s=t_sum, events_rps=small.size / t_ev,
            simpy_rps=small.size / t_sp, ratio_fast_to_simpy=(args.requests / t_fast) / (small.size / t_sp),
            lookup_ms=t_lookup * 1e3,
            mean_latency_ms_fast_events_simpy=[x * 1e3 for x in lat],
            agree=bool(np.allclose(lat, lat[0], rtol=1e-9)),
        ))
    if args.json:
        print(json.dumps(dict(rows=rows, min_fast_rps=min(r["fast_rps"] for r in rows),
                              min_ratio=min(r["ratio_fast_to_simpy"] for r in rows))))
        return 0
    print(f"{'configuration':58s} {'mean b':>6s} {'fast req/s':>12s} {'lookup ms':>9s} {'events req/s':>13s} "
          f"{'fast/events':>11s} {'SimPy req/s':>12s} {'fast/SimPy':>10s} agree")
    for r in rows:
        print(f"{r['config']:58s} {r['batch_size_mean']:6.2f} {r['fast_rps']:12,.0f} {r['lookup_ms']:9.2f} "
              f"{r['events_rps']:13,.0f} {r['fast_rps'] / r['events_rps']:10.1f}x "
              f"{r['simpy_rps']:12,.0f} {r['ratio_fast_to_simpy']:9.1f}x {'yes' if r['agree'] else 'NO'}")
    print(f"slowest fast-engine rate: {min(r['fast_rps'] for r in rows):,.0f} simulated requests/s "
          f"(goal >= 1,000,000); smallest ratio to SimPy: {min(r['ratio_fast_to_simpy'] for r in rows):.1f}x (goal >= 10x)")
    print(f"summary() of {args.requests:,} requests: {max(r['summary_s'] for r in rows):.2f} s at most")
    return 0


if __name__ == "__main__":
    sys.exit(main())
