"""The article's five misconceptions (chapter 09) as experiments: the largest batch
(`batch_size_sweep`, `llm_batch_sweep`), dynamic vs sequence batching (`combination_comparison`),
a tiny delay (`delay_sweep`), KV memory (`kv_growth`), tuning once (`day_experiment`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from batchlab.course.capacity import toy_kv_accounting
from batchlab.course.presets import EMBED_LIKE
from batchlab.load import RequestSpec, run_closed_loop, run_open_loop
from batchlab.models.requests import random_embed_inputs
from batchlab.sim import workload as W
from batchlab.sim.continuous import simulate_continuous
from batchlab.sim.dynamic import simulate_dynamic
from batchlab.sim.lengths import capped_exponential, uniform
from batchlab.sim.service import Affine, TokenCost
from batchlab.sim.static_generation import simulate_static_generation
from batchlab.theory import formulas as F
from batchlab.theory.kv import kv_bytes_for

#: An LLM workload with long contexts: prompts 500–2500 tokens, outputs ~ 400 (capped at 1500).
LONG_CHAT = (uniform(500, 2500), capped_exponential(400, 1500))
#: KV counts as full from this fraction of the budget (`llm_batch_sweep`'s running_kv_full)
KV_FULL = 0.9


def _lat(s: dict[str, Any], key: str = "p99") -> float | None:
    return s["latency_ms"][key] if s.get("latency_ms") else None


def batch_size_sweep(sizes: Sequence[int], rate: float, service: Affine = EMBED_LIKE,
                     delays_us: Sequence[float] = (0.0,), n: int = 20_000, seed: int = 1) -> list[dict[str, Any]]:
    """Dynamic batcher on one instance at Poisson `rate`, per max_batch_size and delay. Rows include
    capacity_rps (B/t(B)) and amdahl_ceiling_rps (1/b)."""
    arr = W.poisson(rate, n, seed=seed)
    rows = []
    for d in delays_us:
        for b in sizes:
            s = simulate_dynamic(arr, service, max_batch_size=int(b), max_queue_delay_us=float(d)).summary()
            rows.append({"max_batch_size": int(b), "delay_us": float(d), "t_full_ms": service.time(int(b)) * 1e3,
                         "capacity_rps": service.throughput(int(b)), "amdahl_ceiling_rps": 1e6 / service.per_item_us,
                         "mean_batch": s["batch_size_mean"], "p50_ms": _lat(s, "p50"), "p99_ms": _lat(s),
                         "stable": s["stable"]})
    return rows


def llm_batch_sweep(max_active: Sequence[int], cost: TokenCost, kv_bytes_per_token: int,
                    kv_budget_bytes: float | None, overload_rate: float = 30.0, n: int = 600,
                    lengths=LONG_CHAT, kv_policy: str = "on_demand", seed: int = 2) -> list[dict[str, Any]]:
    """Continuous batching offered more than it can serve, per cap on running sequences. Rows
    include itl_ms (mean iteration time), kv_need_gib (max_active sequences of the mean full
    length, prompt + output), mean_running (mean over iterations, ramp-up and drain included) and
    running_kv_full (time-weighted mean running while KV holds >= `KV_FULL` of the budget; None
    if it never does)."""
    rng = np.random.default_rng(seed)
    arr = W.poisson(overload_rate, n, seed=rng)
    p = lengths[0].sample(n, rng)
    o = lengths[1].sample(n, rng)
    budget_tok = None if kv_budget_bytes is None else int(kv_budget_bytes // kv_bytes_per_token)
    per_seq = float(np.mean(p + o - 1))
    rows = []
    for m in max_active:
        res = simulate_continuous(arr, p, o, cost, max_active=int(m), kv_token_budget=budget_tok, kv_policy=kv_policy)
        s = res.summary()
        bt = res.batches
        itl = float(np.mean(bt["end"] - bt["start"])) * 1e3 if bt.size else None
        full = np.zeros(bt.size, bool) if budget_tok is None else bt["kv_tokens"] >= KV_FULL * budget_tok
        dt = (bt["end"] - bt["start"])[full]
        running_full = float(np.average(bt["size"][full], weights=dt)) if dt.sum() > 0 else None
        need = m * per_seq * kv_bytes_per_token
        rows.append({"max_active": int(m), "tokens_per_s": s["tokens_per_s"], "itl_ms": itl,
                     "mean_running": s["batch_size_mean"], "running_kv_full": running_full,
                     "kv_peak_gib": s["kv_high_water"] * kv_bytes_per_token / 2**30,
                     "kv_need_gib": need / 2**30,
                     "fits": None if kv_budget_bytes is None else bool(need <= kv_budget_bytes),
                     "preemptions": s.get("preemptions", 0)})
    return rows


#: Prompt and output lengths of `combination_comparison`'s requests (tokens).
COMBINATION_LENGTHS = (uniform(50, 400), capped_exponential(150, 600))


def combination_comparison(rate: float, cost: TokenCost, n: int = 2000, max_batch_size: int = 8,
                           lengths=COMBINATION_LENGTHS,
                           overload_rate: float | None = None, seed: int = 4) -> list[dict[str, Any]]:
    """The same requests under ``dynamic_only`` (padded request-level batches), ``sequence_only``
    (the same with early returns: the article's 「序列模式」) and ``combined`` (continuous batching,
    at most `max_batch_size` running); capacity_tokens_per_s at `overload_rate`, if given."""
    rng = np.random.default_rng(seed)

    def draw(r: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a = W.poisson(r, n, seed=rng)
        return a, lengths[0].sample(n, rng), lengths[1].sample(n, rng)

    runs = {
        "dynamic_only": lambda a, p, o: simulate_static_generation(a, p, o, cost, max_batch_size),
        "sequence_only": lambda a, p, o: simulate_static_generation(a, p, o, cost, max_batch_size, early_return=True),
        "combined": lambda a, p, o: simulate_continuous(a, p, o, cost, max_active=max_batch_size),
    }
    a, p, o = draw(rate)
    over = draw(overload_rate) if overload_rate else None
    rows = []
    for name, run in runs.items():
        s = run(a, p, o).summary()
        row = {"scheduler": name, "p50_s": _lat(s, "p50") / 1e3, "p99_s": _lat(s) / 1e3, "eta": s["eta"],
               "tokens_per_s": s["tokens_per_s"], "stable": s["stable"]}
        if over is not None:
            row["capacity_tokens_per_s"] = run(*over).summary()["tokens_per_s"]
        rows.append(row)
    return rows


def delay_sweep(delays_us: Sequence[float], loads: Sequence[float], service: Affine = EMBED_LIKE,
                max_batch_size: int = 32, instances: int = 1, n: int = 20_000, seed: int = 3) -> list[dict[str, Any]]:
    """Triton's dynamic batcher per (load, delay); load is a fraction of the full-batch capacity,
    gpu_ms_per_req the busy time per completed request."""
    cap = instances * service.throughput(max_batch_size)
    rows = []
    for i, load in enumerate(loads):
        rate = load * cap
        arr = W.poisson(rate, n, seed=seed + i)
        for d in delays_us:
            res = simulate_dynamic(arr, service, max_batch_size=max_batch_size, max_queue_delay_us=float(d),
                                   instances=instances)
            s = res.summary()
            thr = s["throughput_rps"]
            busy = s["utilization"]
            rows.append({"load": float(load), "rate": rate, "delay_us": float(d), "throughput_rps": thr,
                         "mean_batch": s["batch_size_mean"], "p50_ms": _lat(s, "p50"), "p99_ms": _lat(s),
                         "busy": busy, "gpu_ms_per_req": busy * instances / thr * 1e3 if thr else None,
                         "stable": s["stable"]})
    return rows


def kv_growth(lm: Any, concurrency: Sequence[int], prompt_tokens: int = 16, steps: int = 16,
              tokens_per_seq: int = 4096) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(toy LM rows of `toy_kv_accounting`, rows of GiB the same concurrencies need in Llama-2-7B
    and Llama-3-8B at `tokens_per_seq` tokens each)."""
    toy = toy_kv_accounting(lm, concurrency, prompt_tokens, steps)
    scaled = [{"n": int(n), **{m: n * tokens_per_seq * kv_bytes_for(m) / 2**30 for m in ("Llama-2-7B", "Llama-3-8B")}}
              for n in concurrency]
    return toy, scaled


def day_rates(trough: float, peak: float, hours: int = 24, peak_hour: float = 14.0) -> np.ndarray:
    """Mean rate of each hour of a day: `batchlab.sim.workload.diurnal` averaged per hour."""
    fn = W.diurnal(trough, peak, period_s=24.0, peak_at_s=peak_hour)
    edges = np.linspace(0, 24, hours + 1)
    fine = np.linspace(0, 24, hours * 60 + 1)
    vals = fn(0.5 * (fine[:-1] + fine[1:]))
    return np.asarray([vals[(fine[:-1] >= lo) & (fine[:-1] < hi)].mean() for lo, hi in zip(edges[:-1], edges[1:])])


@dataclass(frozen=True)
class DayResult:
    """Per-hour outcome of one policy: instances, p99 (ms), SLO met, instance-hours."""

    policy: str
    instances: list[int]
    p99_ms: list[float]
    ok: list[bool]

    @property
    def instance_hours(self) -> int:
        """Instance-hours paid for over the day."""
        return int(sum(self.instances))

    @property
    def hours_violating(self) -> int:
        """Hours whose p99 missed the SLO."""
        return int(sum(not x for x in self.ok))


def _hour_p99(rate: float, k: int, service: Affine, max_batch_size: int, delay_us: float,
              seconds: float, seed: int) -> float:
    n = max(200, int(rate * seconds))
    arr = W.poisson(rate, n, seed=seed)
    s = simulate_dynamic(arr, service, max_batch_size=max_batch_size, max_queue_delay_us=delay_us,
                         instances=k, warmup=0.1).summary()
    return float(s["latency_ms"]["p99"]) if s["stable"] else math.inf


def day_experiment(rates: Sequence[float], slo_p99_ms: float, fixed_instances: Sequence[int],
                   service: Affine = EMBED_LIKE, max_batch_size: int = 32, delay_us: float = 0.0,
                   max_instances: int = 16, seconds_per_hour: float = 4.0, seed: int = 5) -> list[DayResult]:
    """Each hour simulated at its rate: ``fixed_k`` per k in `fixed_instances`, and ``retuned`` (each
    hour the fewest instances meeting `slo_p99_ms`); an unstable hour counts as p99 = inf."""
    def p99_at(hour: int, rate: float, k: int) -> float:
        return _hour_p99(rate, k, service, max_batch_size, delay_us, seconds_per_hour, seed + hour)

    results = []
    for k in fixed_instances:
        p99 = [p99_at(h, r, int(k)) for h, r in enumerate(rates)]
        results.append(DayResult(f"fixed_{k}", [int(k)] * len(rates), p99, [x <= slo_p99_ms for x in p99]))
    inst, p99s = [], []
    for h, r in enumerate(rates):
        k = max(1, int(math.ceil(r / service.throughput(max_batch_size))))
        while (p := p99_at(h, r, k)) > slo_p99_ms and k < max_instances:
            k += 1
        inst.append(k)
        p99s.append(p)
    results.append(DayResult("retuned", inst, p99s, [x <= slo_p99_ms for x in p99s]))
    return results


def measure_delay_pair(server: Any, models: Sequence[str], concurrency: int = 16, rate: float = 100.0,
                       seconds: float = 2.0, seed: int = 0) -> list[dict[str, Any]]:
    """Per model, a closed loop at `concurrency` and an open loop at Poisson `rate`. Rows: model,
    mode, throughput_rps, p50_ms, p99_ms, mean_batch, busy_ms_per_req (statistics extension), requests
    (answered) and errors."""
    spec = RequestSpec(random_embed_inputs(seed=seed, high=200))
    rows = []
    for m in models:
        closed = run_closed_loop(server, m, spec, concurrency=concurrency, duration_s=seconds, warmup_s=0.3,
                                 progress=False)
        opened = run_open_loop(server, m, spec, rate=rate, duration_s=seconds, seed=seed, progress=False)
        for mode, rep in ((f"closed c={concurrency}", closed), (f"open {rate:g}/s", opened)):
            lat = rep.latency_ms()
            busy = rep.server.busy_seconds if rep.server is not None else math.nan
            ok = rep.n_ok
            rows.append({"model": m, "mode": mode,
                         "throughput_rps": rep.throughput_rps, "p50_ms": lat["p50"], "p99_ms": lat["p99"],
                         "mean_batch": rep.mean_batch_size(), "busy_ms_per_req": busy / ok * 1e3 if ok else math.nan,
                         "requests": ok, "errors": rep.n_errors})
    return rows


def overload_throughput(sizes: Sequence[int], service: Affine = EMBED_LIKE, n: int = 20_000,
                        seed: int = 6) -> list[dict[str, Any]]:
    """One instance offered twice its full-batch capacity, per max_batch_size. Rows:
    max_batch_size, simulated_rps, closed_form_rps (B/t(B)), speedup_sim, amdahl_sp."""
    f = F.amdahl_f_from_affine(service.base_us, service.per_item_us)
    base = service.throughput(1)
    rows = []
    for i, b in enumerate(sizes):
        arr = W.poisson(2.0 * service.throughput(int(b)), n, seed=seed + i)
        s = simulate_dynamic(arr, service, max_batch_size=int(b)).summary()
        rows.append({"max_batch_size": int(b), "simulated_rps": s["throughput_rps"],
                     "closed_form_rps": service.throughput(int(b)),
                     "speedup_sim": s["throughput_rps"] / base, "amdahl_sp": F.amdahl(f, int(b))})
    return rows
