"""`python -m batchlab.bench client`: is the load generator fast enough not to be the bottleneck?

Against `noop`, with the client pinned to one core: an open loop at the labs' highest rate must keep
its schedule, and the client's capacity (requests per client CPU second, gRPC and HTTP, closed loop)
must be >= 5 x that rate.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from batchlab.bench.common import CpuWatch, Timer, bench_server, log, machine, r3, verdict
from batchlab.load import RequestSpec, run_closed_loop, run_open_loop

LAB_MAX_RATE_RPS = 1300.0
"""The highest request rate a lab drives the real server at: lab 5's burst, 2.5 x `embed`'s closed-loop capacity."""


def _pin_one_core() -> tuple[set[int] | None, int | None]:
    if not hasattr(os, "sched_getaffinity"):
        return None, None
    before = os.sched_getaffinity(0)
    core = max(before)
    os.sched_setaffinity(0, {core})
    return before, core


def run(duration_s: float = 5.0, concurrency: int = 64, lab_max_rate: float = LAB_MAX_RATE_RPS,
        check_s: float = 4.0) -> dict[str, Any]:
    """Check the client at the labs' top rate, measure its capacity; return the JSON object."""
    clock = Timer()
    spec = RequestSpec({"INPUT0": np.arange(16, dtype=np.float32)[None, :]})
    out: dict[str, Any] = {"benchmark": "client", "model": "noop", "payload": "16 float32 in, 16 out"}
    with bench_server(["noop"]) as server, CpuWatch(server) as watch:
        before, core = _pin_one_core()
        try:
            out["client_pinned_to_core"] = core
            target = lab_max_rate
            chk = run_open_loop(server, "noop", spec, rate=target, duration_s=check_s, warmup_s=0.5, seed=3,
                                stats=False, progress=False)
            late = chk.lateness_ms()
            log(f"open loop at {target:.0f} req/s: answered {chk.throughput_rps:.0f} req/s, "
                f"send lateness p95 {late['p95']:.2f} ms ({clock():.0f} s)")
            cap = {}
            for proto in ("grpc", "http"):
                rep = run_closed_loop(server, "noop", spec, concurrency=concurrency, duration_s=duration_s,
                                      warmup_s=0.5, protocol=proto, stats=False, progress=False)
                per_req = rep.client_cpu_s / rep.n if rep.n else float("nan")
                cap[proto] = {"requests": rep.n, "errors": rep.n_errors,
                              "achieved_rps": r3(rep.throughput_rps),
                              "client_cpu_share_of_one_core": r3(rep.client_cpu_s / rep.wall_s),
                              "client_cpu_us_per_request": r3(per_req * 1e6),
                              "capacity_rps_one_core": r3(1.0 / per_req)}
                log(f"{proto}: {rep.throughput_rps:.0f} req/s achieved, {per_req * 1e6:.0f} us client CPU per "
                    f"request -> {1 / per_req:.0f} req/s per core ({clock():.0f} s)")
        finally:
            if before is not None:
                os.sched_setaffinity(0, before)
    capacity = cap["grpc"]["capacity_rps_one_core"]
    out.update({
        "capacity": cap,
        "capacity_rps_one_core": capacity,
        "lab_max_rate_rps": lab_max_rate,
        "capacity_over_lab_max": r3(capacity / lab_max_rate),
        "open_loop_check": {
            "offered_rps": r3(target), "requests": chk.n, "errors": chk.n_errors,
            "answered_rps": r3(chk.throughput_rps),
            "send_lateness_ms": {k: r3(late[k]) for k in ("p50", "p95", "p99", "max")},
            "client_cpu_us_per_request": r3(chk.client_cpu_s / chk.n * 1e6) if chk.n else None,
            "client_kept_up": chk.client_kept_up(),
            "client_cpu_share_of_one_core": r3(chk.client_cpu_s / chk.wall_s),
            "latency_ms": {k: r3(v) for k, v in chk.latency_ms().items() if k in ("p50", "p99")},
        },
        "goal": "capacity >= 5 x the highest lab rate (and the open loop at that rate kept on schedule)",
        "elapsed_s": r3(clock()),
        "machine": machine(watch),
    })
    out.update(verdict(capacity >= 5 * lab_max_rate and chk.client_kept_up()
                       and abs(chk.throughput_rps / target - 1) < 0.05 and chk.n_errors == 0, out["machine"]))
    return out
