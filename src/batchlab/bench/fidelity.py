"""`python -m batchlab.bench fidelity`: the simulator's predictions against the real server.

Two parts, one server: `embed` (dynamic batcher, `simulate_dynamic` with the fixed t(B) of
`calibrate_service` scaled by `load_factor`, as chapter 4 derives) and `lm_stream` (continuous
batching, `simulate_continuous` with a fixed `TokenCost` fitted to the engine's steps). Each load
is one Poisson schedule, cut into `rounds` segments; every segment is run twice (A and B,
interleaved A B B A ...) and simulated once from an idle server. A figure meets its goal when
|prediction - measurement| <= max(goal band x measurement, |A - B|), the measurement being the
mean of A and B (`judge`).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from batchlab.bench.common import (BenchError, CpuWatch, Timer, bench_server, embed_prompts, embed_source,
                                   int_parameters, log, machine, r3, require_answers)
from batchlab.bench.continuous import workload
from batchlab.load import RequestSpec, poisson_arrivals, pool_reports, run_closed_loop, run_open_loop
from batchlab.models.requests import generate_inputs
from batchlab.probe.batch_time import calibrate_service, load_factor
from batchlab.sim.continuous import simulate_continuous
from batchlab.sim.dynamic import simulate_dynamic
from batchlab.sim.lengths import capped_exponential
from batchlab.sim.service import TokenCost
from batchlab.sim.summary import percentile_summary
from batchlab.theory.formulas import fit_affine, relative_error

EMBED, LM = "embed", "lm_stream"
GOALS = {"throughput": 0.05, "p50": 0.10, "p99": 0.20}
"""Goal band of each figure, relative to the measurement (for lm_stream: tokens/s, TTFT p50, TTFT p99)."""
EMBED_LEVELS = (("light", 0.25), ("medium", 0.55), ("near_saturation", 0.75))
"""Fractions of embed's full-batch capacity max_B B / t(B) (calibrated, unscaled)."""
LM_LOADS = (("medium", 0.5), ("near_capacity", 0.75))
"""Fractions of the requests/s the simulated engine serves with a full queue (fitted step cost)."""
ROUNDS = 2
WARMUP_S = 0.3
PROBE_S = (3.0, 8.0)
"""Seconds of the run at each load's rate (own seed) that calibrates it: embed, lm_stream."""
LM_MEAN_TOKENS, LM_MAX_TOKENS = 24.0, 128


def judge(predicted: float, a: float, b: float, band: float) -> dict[str, Any]:
    """One figure: the measurement is the mean of runs A and B; the goal is met when
    |predicted - measurement| <= max(band x |measurement|, |A - B|); `decided_by` names the larger
    bound ("band" on a tie)."""
    meas = (a + b) / 2
    band_abs, noise = band * abs(meas), abs(a - b)
    err = predicted - meas
    ok = all(math.isfinite(x) for x in (predicted, a, b))
    return {"predicted": r3(predicted), "measured_a": r3(a), "measured_b": r3(b), "measured": r3(meas),
            "error": r3(err), "relative_error": r3(relative_error(predicted, meas)) if meas else None,
            "band": r3(band_abs), "noise": r3(noise), "decided_by": "band" if band_abs >= noise else "noise",
            "met": bool(ok and abs(err) <= max(band_abs, noise))}


def judge_figures(pred: Mapping[str, float], a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, Any]:
    """`judge` for every figure of `GOALS` (keys of `pred`, `a` and `b`, in `GOALS`' order)."""
    return {k: judge(pred[k], a[k], b[k], GOALS[k]) for k in GOALS}


def all_met(parts: Mapping[str, Mapping[str, Any]]) -> bool:
    """True when every figure of every load of every part met its goal."""
    return all(f["met"] for loads in parts.values() for lv in loads.values() for f in lv["figures"].values())


def segments(arrivals: np.ndarray, rounds: int, duration_s: float) -> list[np.ndarray]:
    """Index arrays cutting sorted `arrivals` (over `duration_s`) into `rounds` equal time windows."""
    cuts = np.searchsorted(arrivals, [j * duration_s / rounds for j in range(1, rounds)])
    return np.split(np.arange(arrivals.size), cuts)


def ab_order(rounds: int) -> list[tuple[int, str]]:
    """(segment, run) in the order they are run: A B, B A, A B, ... (a linear drift weighs on both alike)."""
    return [(j, x) for j in range(rounds) for x in ("AB" if j % 2 == 0 else "BA")]


def measure_twice(run: Callable[[np.ndarray, int, str], Any], arrivals: np.ndarray, segs: list[np.ndarray],
                  duration_s: float) -> tuple[Any, Any]:
    """Run every segment twice (`ab_order`; each from 0 s) with ``run(send_times, segment, "A"|"B")``;
    return the pooled reports of runs A and B."""
    reps: dict[str, list[Any]] = {"A": [], "B": []}
    for j, x in ab_order(len(segs)):
        reps[x].append(run(arrivals[segs[j]] - j * duration_s / len(segs), j, x))
    return pool_reports(reps["A"], label="A"), pool_reports(reps["B"], label="B")


def predict_embed(parts: Sequence[np.ndarray], service: Any, max_batch: int, overhead_ms: float) -> dict[str, float]:
    """Each segment simulated from an idle server, pooled: throughput, latency p50/p99 (+ overhead), mean batch."""
    lat, done, span, execs = [], 0, 0.0, []
    for arr in parts:
        res = simulate_dynamic(arr, service, max_batch, warmup=0.0)
        fin = res.records["finish"]
        lat.append((fin - res.records["arrival"]) * 1e3 + overhead_ms)
        done, span = done + int(np.isfinite(fin).sum()), span + float(np.nanmax(fin))
        execs.append(res.batches["size"])
    pct = percentile_summary(np.concatenate(lat), scale=1.0)
    return {"throughput": done / span, "p50": pct["p50"], "p99": pct["p99"],
            "mean_batch_size": float(np.concatenate(execs).mean())}


def embed_figures(rep: Any) -> dict[str, float]:
    lat = rep.latency_ms()
    return {"throughput": rep.throughput_rps, "p50": lat["p50"], "p99": lat["p99"],
            "mean_batch_size": rep.mean_batch_size()}


def embed_part(server: Any, level_s: float, rounds: int, seed: int, clock: Timer) -> tuple[dict[str, Any], dict]:
    """Calibrate t(B) once (`calibrate_service`); per level a run at its rate gives the load factor and
    the overhead; predict, then measure twice. Returns (levels, calibration JSON)."""
    src = embed_source(embed_prompts(512, seed=2))
    run_closed_loop(server, EMBED, src, concurrency=8, duration_s=0.5, progress=False)  # warm the model up
    cal = calibrate_service(server, EMBED, batch_sizes=(1, 2, 4, 8, 16, 32))
    max_b = max(cal.batch_sizes)
    cap = max(b / cal.service().time(b) for b in cal.batch_sizes)
    log(f"embed calibrated: t(1) {cal.service_ms[1]:.2f} ms, t({max_b}) {cal.service_ms[max_b]:.2f} ms, "
        f"capacity {cap:.0f} req/s ({clock():.0f} s)")
    levels: dict[str, Any] = {}
    for k, (name, frac) in enumerate(EMBED_LEVELS):
        rate = frac * cap
        probe = require_answers(run_open_loop(server, EMBED, src, rate=rate, duration_s=PROBE_S[0], warmup_s=WARMUP_S,
                                              seed=seed + 1000 + k, progress=False, warn=False), f"{name}: probe")
        try:
            measured = load_factor(cal, probe.server, min_batches=3)
        except ValueError:  # no batch size executed 3 times in the probe: the calibrated t(B) as it is
            measured = math.nan
        factor = measured if math.isfinite(measured) else 1.0
        sp = probe.split_ms()
        overhead = sp["total"] - sp["queue"] - sp["compute"]
        arrivals = poisson_arrivals(rate, duration=level_s, seed=seed + k)
        segs = segments(arrivals, rounds, level_s)

        def run(send: np.ndarray, j: int, x: str, name: str = name, k: int = k) -> Any:
            return require_answers(run_open_loop(server, EMBED, src, arrivals=send, warmup_s=WARMUP_S,
                                                 seed=seed + 100 * k + j, progress=False, warn=False,
                                                 label=f"{name} {x}"), f"{name}: run {x}{j}")
        a, b = measure_twice(run, arrivals, segs, level_s)
        parts = [arrivals[s] - j * level_s / rounds for j, s in enumerate(segs)]
        pred = predict_embed(parts, cal.service(scale=factor), max_b, overhead)
        fa, fb = embed_figures(a), embed_figures(b)
        levels[name] = {"rate_rps": r3(rate), "fraction_of_capacity": frac, "requests_per_run": int(arrivals.size),
                        "load_factor": r3(measured), "overhead_ms": r3(overhead),
                        "figures": judge_figures(pred, fa, fb),
                        "mean_batch_size": {"predicted": r3(pred["mean_batch_size"]),
                                            "measured_a": r3(fa["mean_batch_size"]),
                                            "measured_b": r3(fb["mean_batch_size"])}}
        log(f"embed {name} @ {rate:.0f} req/s: p50 {pred['p50']:.1f} / {fa['p50']:.1f} / {fb['p50']:.1f} ms, p99 "
            f"{pred['p99']:.1f} / {fa['p99']:.1f} / {fb['p99']:.1f} ms (predicted / A / B) ({clock():.0f} s)")
    return levels, {"batch_time_ms": {str(b): r3(t) for b, t in cal.service_ms.items()},
                    "capacity_rps": r3(cap), "overhead_ms_at_concurrency_1": r3(cal.overhead_ms)}


def stream_source(prompts: list[np.ndarray], lengths: np.ndarray,
                  sink: dict[int, np.ndarray]) -> Callable[[int], RequestSpec]:
    """Request i: greedy, IGNORE_EOS (exactly lengths[i] tokens); `sink[i]` gets its per-token
    (INDEX, ACTIVE, WAITING, KV_TOKENS) rows."""
    def make(i: int) -> RequestSpec:
        k = i % len(prompts)

        def check(outs: list[dict]) -> None:
            sink[i] = np.array([[int(o[n].reshape(-1)[0]) for n in ("INDEX", "ACTIVE", "WAITING", "KV_TOKENS")]
                                for o in outs], dtype=np.int64).reshape(-1, 4)
        return RequestSpec(generate_inputs(prompts[k], int(lengths[k]), ignore_eos=True, batched=False),
                           check=check, expected_tokens=int(lengths[k]))
    return make


def step_times(rep: Any, rows: Mapping[int, np.ndarray], prompts: list[np.ndarray]) -> np.ndarray:
    """(decoding sequences, prefill tokens, seconds) of the engine's timed steps, rebuilt from the streamed
    tokens: the tokens of one step arrive together with the same (ACTIVE, WAITING, KV_TOKENS); a step is
    timed (from the previous step's first token to its own) when both held ACTIVE tokens and it had a
    decoding sequence (the engine ran back to back)."""
    r = rep.records
    ev = sorted((t, int(i), *rows[int(i)][n].tolist()) for i, ts, e in zip(r.index, r.token_times, r.error)
                if ts and e is None and int(i) in rows and len(rows[int(i)]) == len(ts) for n, t in enumerate(ts))
    groups: list[list[tuple]] = []
    for e in ev:
        if not groups or e[3:] != groups[-1][0][3:] or any(x[1] == e[1] for x in groups[-1]):
            groups.append([])
        groups[-1].append(e)
    out, prev = [], None
    for g in groups:
        if len(g) != g[0][3]:
            prev = None
            continue
        dec = sum(1 for x in g if x[2] > 0)
        if prev is not None and dec:
            out.append((dec, sum(len(prompts[x[1] % len(prompts)]) for x in g if x[2] == 0), g[0][0] - prev))
        prev = g[0][0]
    return np.array(out, dtype=float).reshape(-1, 3)


def fit_step_cost(steps: np.ndarray) -> TokenCost:
    """Fixed step cost: t = a + b x decoding sequences (`fit_affine` over the decode-only steps), plus
    the median extra time per prefill token of the steps that prefilled."""
    dec, pre, us = steps[:, 0], steps[:, 1], steps[:, 2] * 1e6
    only = pre == 0
    if only.sum() < 8 or np.unique(dec[only]).size < 2:
        raise BenchError(f"lm_stream calibration timed {int(only.sum())} decode-only steps of "
                         f"{np.unique(dec[only]).size} sizes: too few to fit the step cost; rerun")
    a, b = fit_affine(dec[only], us[only])
    a, b = max(a, 1.0), max(b, 0.0)
    extra = (us[~only] - a - b * dec[~only]) / pre[~only]
    return TokenCost(prefill_per_token=max(float(np.median(extra)), 0.0) if extra.size else 0.0,
                     decode_base=a, decode_per_seq=b)


def lm_simulate(arrivals: np.ndarray, prompts: list[np.ndarray], lengths: np.ndarray, cost: TokenCost,
                policy: Mapping[str, int]) -> Any:
    return simulate_continuous(arrivals, [len(p) for p in prompts], lengths, cost, max_active=policy["max_active"],
                               kv_token_budget=policy["kv_token_budget"], kv_policy="reserve", warmup=0.0)


def lm_workload(n: int, seed: int) -> tuple[list[np.ndarray], np.ndarray]:
    """`bench continuous`'s prompts, output lengths from a capped exponential (seeded)."""
    prompts, lengths = workload(n, capped_exponential(LM_MEAN_TOKENS, LM_MAX_TOKENS), seed)
    return prompts, lengths.astype(np.int64)


def lm_run(server: Any, prompts: list[np.ndarray], lengths: np.ndarray, **kw: Any) -> tuple[Any, dict]:
    """One lm_stream run (open loop with ``arrivals``, else closed) with token times -> (report, rows)."""
    rows: dict[int, np.ndarray] = {}
    runner = run_open_loop if "arrivals" in kw else run_closed_loop
    rep = runner(server, LM, stream_source(prompts, lengths, rows), protocol="grpc-stream", stats=False,
                 progress=False, record_token_times=True, **kw)
    return require_answers(rep, f"lm_stream {kw.get('label') or 'calibration'}"), rows


def lm_overhead_ms(rep: Any, prompts: list[np.ndarray], lengths: np.ndarray, cost: TokenCost,
                   policy: Mapping[str, int]) -> float:
    """Median over a run's requests of measured TTFT - simulated TTFT, simulated with its measured send times."""
    r = rep.records
    ok = r.ok & np.isfinite(r.sent)
    order = np.argsort(r.sent[ok], kind="stable")
    idx = r.index[ok][order] % len(prompts)
    sent = r.sent[ok][order]
    sim = lm_simulate(sent - sent[0], [prompts[i] for i in idx], lengths[idx], cost, policy)
    return float(np.median(r.ttft[ok][order] - (sim.records["first_token"] - sim.records["arrival"]))) * 1e3


def predict_lm(parts: Sequence[tuple[np.ndarray, list, np.ndarray]], cost: TokenCost, policy: Mapping[str, int],
               overhead_ms: float) -> dict[str, float]:
    """Each segment simulated from an idle engine, pooled: tokens/s and TTFT p50/p99 (+ overhead)."""
    tokens, span, ttft = 0.0, 0.0, []
    for arr, p, o in parts:
        rec = lm_simulate(arr, p, o, cost, policy).records
        tokens, span = tokens + float(o.sum()), span + float(np.nanmax(rec["finish"]))
        ttft.append((rec["first_token"] - rec["arrival"]) * 1e3 + overhead_ms)
    pct = percentile_summary(np.concatenate(ttft), scale=1.0)
    return {"throughput": tokens / span, "p50": pct["p50"], "p99": pct["p99"]}


def lm_figures(rep: Any) -> dict[str, float]:
    tt = rep.ttft_ms()
    return {"throughput": rep.tokens_per_s, "p50": tt["p50"], "p99": tt["p99"]}


def lm_part(server: Any, level_s: float, rounds: int, seed: int, clock: Timer) -> tuple[dict[str, Any], dict]:
    """Fit the step cost to closed loops, then per load to a run at its rate (which also gives the TTFT
    overhead); predict, then measure twice. Returns (loads, calibration JSON)."""
    policy = int_parameters(LM, ("max_active", "kv_token_budget"))  # lm_stream's scheduling, from its config
    steps = []
    for k, conc in enumerate((2, 8)):
        p, o = lm_workload(6 * conc, seed + 900 + k)
        rep, rows = lm_run(server, p, o, concurrency=conc, n_requests=len(p))
        steps.append(step_times(rep, rows, p))
    base = fit_step_cost(np.concatenate(steps))
    fp, fo = lm_workload(400, seed + 950)
    fin = lm_simulate(np.zeros(len(fp)), fp, fo, base, policy).records["finish"]
    cap = len(fp) / float(np.nanmax(fin))
    log(f"lm_stream calibrated: {base}, capacity {cap:.1f} req/s ({clock():.0f} s)")
    loads: dict[str, Any] = {}
    for k, (name, frac) in enumerate(LM_LOADS):
        rate = frac * cap
        pp, po = lm_workload(max(16, int(rate * PROBE_S[1] * 1.5)), seed + 2000 + k)
        probe, rows = lm_run(server, pp, po, arrivals=poisson_arrivals(rate, duration=PROBE_S[1], seed=seed + 3000 + k),
                             warmup_s=WARMUP_S, warn=False, label=f"{name} probe")
        st = step_times(probe, rows, pp)
        try:
            cost = fit_step_cost(st)
        except BenchError:  # too few decode-only steps at this rate: add the closed loops'
            cost = fit_step_cost(np.concatenate([st, *steps]))
        overhead = lm_overhead_ms(probe, pp, po, cost, policy)
        arrivals = poisson_arrivals(rate, duration=level_s, seed=seed + k)
        prompts, lengths = lm_workload(arrivals.size, seed + 10 + k)
        segs = segments(arrivals, rounds, level_s)

        def run(send: np.ndarray, j: int, x: str, name: str = name, k: int = k, segs: list = segs,
                prompts: list = prompts, lengths: np.ndarray = lengths) -> Any:
            s = segs[j]
            return lm_run(server, [prompts[i] for i in s], lengths[s], arrivals=send, warmup_s=WARMUP_S,
                          seed=seed + 100 * k + j, warn=False, label=f"{name} {x}{j}")[0]
        a, b = measure_twice(run, arrivals, segs, level_s)
        parts = [(arrivals[s] - j * level_s / rounds, [prompts[i] for i in s], lengths[s]) for j, s in enumerate(segs)]
        pred = predict_lm(parts, cost, policy, overhead)
        fa, fb = lm_figures(a), lm_figures(b)
        loads[name] = {"rate_rps": r3(rate), "fraction_of_capacity": frac, "requests_per_run": int(arrivals.size),
                       "step_cost_us": _cost_us(cost),
                       "timed_steps": int(st.shape[0]), "ttft_overhead_ms": r3(overhead),
                       "figures": judge_figures(pred, fa, fb)}
        log(f"lm_stream {name} @ {rate:.1f} req/s: tokens/s {pred['throughput']:.0f} / {fa['throughput']:.0f} / "
            f"{fb['throughput']:.0f}, TTFT p50 {pred['p50']:.1f} / {fa['p50']:.1f} / {fb['p50']:.1f} ms, p99 "
            f"{pred['p99']:.1f} / {fa['p99']:.1f} / {fb['p99']:.1f} ms (predicted / A / B) ({clock():.0f} s)")
    return loads, {"policy": policy, "step_cost_us": _cost_us(base), "capacity_rps": r3(cap)}


def _cost_us(cost: TokenCost) -> dict[str, float]:
    return {k: r3(getattr(cost, k)) for k in ("decode_base", "decode_per_seq", "prefill_per_token")}


def run(level_s: float = 8.0, lm_level_s: float = 30.0, rounds: int = ROUNDS, seed: int = 0,
        continuous: bool = True) -> dict[str, Any]:
    """Both parts on one server (embed only without `continuous`); the benchmark's JSON object.

    `level_s` / `lm_level_s`: seconds of each load's schedule, run twice (A and B) in `rounds` segments.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds!r}")
    clock = Timer()
    with bench_server([EMBED, LM] if continuous else [EMBED]) as server, CpuWatch(server) as watch:
        log(f"server ready in {clock():.0f} s")
        parts, calibration = {}, {}
        parts["embed"], calibration["embed"] = embed_part(server, level_s, rounds, seed, clock)
        if continuous:
            parts["lm_stream"], calibration["lm_stream"] = lm_part(server, lm_level_s, rounds, seed, clock)
    decided = {f"{p}.{lv}.{k}": f["decided_by"] for p, loads in parts.items() for lv, v in loads.items()
               for k, f in v["figures"].items()}
    return {
        "benchmark": "fidelity",
        "goal_met": all_met(parts),
        "rule": ("a figure meets its goal when |predicted - measured| <= max(band, noise): measured = mean of "
                 "runs A and B (the same schedule, interleaved segment by segment), band = goal x measured, "
                 "noise = |A - B|; throughput is tokens/s and p50/p99 are TTFT for lm_stream"),
        "goals": {k: f"within {v:.0%}" for k, v in GOALS.items()},
        "decided_by_noise": sorted(k for k, v in decided.items() if v == "noise"),
        "schedule": {"embed_level_s": level_s, "lm_stream_level_s": lm_level_s if continuous else None,
                     "rounds": rounds, "order": "".join(x for _, x in ab_order(rounds)), "seed": seed},
        "calibration": calibration,
        **parts,
        "elapsed_s": r3(clock()),
        "machine": machine(watch),
    }
