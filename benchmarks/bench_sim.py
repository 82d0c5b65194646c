"""Benchmark: simulated requests per second of batchlab.sim's dynamic batcher, the ratio to SimPy,
and how close the simulator's batches are to the real server's (Lab 2's recordings).

Not a test: it prints figures. Each configuration runs the default engine on ``--requests`` Poisson
arrivals (median of ``--repeat`` runs, records included, summary timed apart), the event engine and
the independent SimPy model of Triton's payloads (tests/simpy_dynamic.py ``simulate_payloads``) on
the first ``--simpy-requests`` of the same arrivals, and checks the three agree on mean latency.

Every run drives `batchlab.batching.dynamic`: Triton's batcher with its payloads (core r24.10). Where
the payloads change nothing (delay 0 and no preferred size, or max_batch_size 1: `coincides`) the
default engine is `run_fast`, one `next_batch` answer per queue length looked up ("fast path");
elsewhere it is the faithful model ("faithful"): `run_payloads` moves the batcher's state event by
event through its own methods, `next_batch`'s answers looked up and arrivals that cannot wake the
batcher queued in bulk. The "events" engine (`run_events`, the reference driver, which runs every
configuration) gives the same records bit for bit (tests/test_sim_dynamic.py). Goals (issue #40):
>= 1 M simulated requests/s, or the faithful model's cost stated with its rate (>= 300 k/s); >= 10x
the SimPy model.

The fidelity figure: over the recorded patterns, the mean share of a pattern's requests that the
simulator puts in a batch of another size than a recording did, against the same share between two
recordings of the pattern (`batchlab.labs.record_lab2.fidelity`).

    python benchmarks/bench_sim.py [--requests 1000000] [--simpy-requests 100000] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import simpy_dynamic  # noqa: E402

from batchlab.labs.record_lab2 import fidelity  # noqa: E402
from batchlab.labs.recorded import load  # noqa: E402
from batchlab.sim import workload  # noqa: E402
from batchlab.sim.dynamic import coincides, simulate_dynamic  # noqa: E402
from batchlab.batching import BatchRule  # noqa: E402
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


def fidelity_figure() -> dict:
    """The simulator against Lab 2's recordings (see the module docstring)."""
    rows = fidelity(load("lab2_batches"))
    agreed = [r for r in rows if r["agreed"] is not None]
    excess = [r["sim_vs_recording"] - r["recording_vs_recording"] for r in rows]
    return dict(patterns=len(rows), recordings=len(rows[0]["recordings"]) if rows else 0,
                sim_vs_recording=float(np.mean([r["sim_vs_recording"] for r in rows])),
                recording_vs_recording=float(np.mean([r["recording_vs_recording"] for r in rows])),
                agreed=len(agreed), agreed_predicted=sum(r["sim"] == r["agreed"] for r in agreed),
                worst_excess=float(max(excess)), worst_pattern=rows[int(np.argmax(excess))]["name"])


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
        t_fast, res = timed(partial(simulate_dynamic, a, svc, m, d, pref, k), args.repeat)
        t_sum, summ = timed(res.summary, 1)
        small = a[: args.simpy_requests]
        t_ev, ev = timed(partial(simulate_dynamic, small, svc, m, d, pref, k, engine="events"), 1)
        t_sp, (_, sp_finish) = timed(partial(simpy_dynamic.simulate_payloads, small, base, per, m, d, pref, k), 1)
        fast_small = simulate_dynamic(small, svc, m, d, pref, k)
        lat = [float(np.mean(x - small)) for x in (fast_small.records["finish"], ev.records["finish"], sp_finish)]
        rows.append(dict(
            config=name, requests=args.requests, batch_size_mean=summ["batch_size_mean"], rho=summ["rho"],
            path="fast path" if coincides(BatchRule(m, pref, d)) else "faithful",
            fast_rps=args.requests / t_fast, summary_s=t_sum, events_rps=small.size / t_ev,
            simpy_rps=small.size / t_sp, ratio_fast_to_simpy=(args.requests / t_fast) / (small.size / t_sp),
            mean_latency_ms_fast_events_simpy=[x * 1e3 for x in lat],
            agree=bool(np.allclose(lat, lat[0], rtol=1e-9)),
        ))
    faithful = [r["fast_rps"] for r in rows if r["path"] == "faithful"]
    fid = fidelity_figure()
    if args.json:
        print(json.dumps(dict(rows=rows, min_fast_rps=min(r["fast_rps"] for r in rows),
                              min_faithful_rps=min(faithful) if faithful else None,
                              min_ratio=min(r["ratio_fast_to_simpy"] for r in rows), fidelity=fid)))
        return 0
    print(f"{'configuration':58s} {'path':9s} {'mean b':>6s} {'req/s':>12s} {'events req/s':>13s} "
          f"{'SimPy req/s':>12s} {'x SimPy':>8s} agree")
    for r in rows:
        print(f"{r['config']:58s} {r['path']:9s} {r['batch_size_mean']:6.2f} {r['fast_rps']:12,.0f} "
              f"{r['events_rps']:13,.0f} {r['simpy_rps']:12,.0f} {r['ratio_fast_to_simpy']:7.1f}x "
              f"{'yes' if r['agree'] else 'NO'}")
    print(f"fast path (payloads change nothing): {min(r['fast_rps'] for r in rows if r['path'] == 'fast path'):,.0f} "
          "simulated requests/s at least (goal >= 1,000,000)")
    if faithful:
        print(f"faithful model (delay or preferred sizes: payloads, rate limiter, wake-up rule): "
              f"{min(faithful):,.0f} to {max(faithful):,.0f} simulated requests/s "
              f"({1e6 / min(faithful):.1f} us per request at most; issue #40's floor: 300,000/s)")
    print(f"smallest ratio to the SimPy payload model: {min(r['ratio_fast_to_simpy'] for r in rows):.1f}x (goal >= 10x)")
    print(f"summary() of {args.requests:,} requests: {max(r['summary_s'] for r in rows):.2f} s at most")
    print(f"fidelity over {fid['patterns']} recorded patterns x {fid['recordings']} recordings: requests in a batch "
          f"of another size, simulator vs recording {fid['sim_vs_recording']:.3f}, recording vs recording "
          f"{fid['recording_vs_recording']:.3f}; recordings agree on {fid['agreed']}, simulator exact on "
          f"{fid['agreed_predicted']}; largest excess over a pattern's own spread {fid['worst_excess']:.2f} "
          f"({fid['worst_pattern']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
