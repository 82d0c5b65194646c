"""The article's two case studies (chapter 07): closed-form checks on the article's numbers, and
simulations whose unstated assumptions sit in a dataclass or tenant table a reader can change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from batchlab.course.presets import LLM_COST
from batchlab.load import RequestSpec, run_open_loop
from batchlab.models.requests import generate_inputs
from batchlab.quiz.audit import display_width
from batchlab.sim import workload as W
from batchlab.sim.continuous import simulate_continuous
from batchlab.sim.dynamic import simulate_dynamic
from batchlab.sim.lengths import LengthDist, capped_exponential, fixed, uniform
from batchlab.sim.results import SimResult
from batchlab.sim.service import Affine, TokenCost
from batchlab.sim.static_generation import simulate_static_generation
from batchlab.sim.summary import percentile

#: The article's case 1, exactly as stated.
ECOMMERCE = {"rate_qps": 5000.0, "max_batch_size": 8, "max_queue_delay_ms": 50.0,
             "p95_before_s": 6.0, "p95_after_s": 2.0, "util_before": 0.22, "util_after": 0.67}


def fill_time_s(batch: int, rate_per_s: float) -> float:
    """Mean age of the oldest request when a batch of `batch` has gathered from Poisson arrivals at
    `rate_per_s`: (batch − 1)/rate. Triton's delay clock is that age (core `GetDynamicBatch`:
    ``delay_ns = now_ns - queue_.OldestEnqueueTime()``): it starts at the batch's first request,
    and the batch is full after the batch − 1 arrivals that follow."""
    if batch < 1 or rate_per_s <= 0:
        raise ValueError("batch must be >= 1 and rate_per_s > 0")
    return (batch - 1) / rate_per_s


def replicas_where_delay_matters(rate_per_s: float, batch: int, delay_s: float) -> float:
    """rate·delay/(batch − 1): above this many replicas sharing `rate_per_s`, a replica's batch
    takes longer than `delay_s` to fill after its first request (`fill_time_s` at rate/N), so the
    delay, not the batch size, sends it. A batch of 1 is full at once: the delay never matters (inf)."""
    if batch < 1 or rate_per_s <= 0 or delay_s <= 0:
        raise ValueError("batch must be >= 1, rate_per_s and delay_s > 0")
    return math.inf if batch == 1 else rate_per_s * delay_s / (batch - 1)


def overhead_ratio(util_at_batch1: float, busy: float = 1.0) -> float:
    """Reading A of "GPU utilisation" (kernel time share): with t(B) = a + b·B and the GPU idle
    during a, util(B=1) = busy · b/(a + b), so a/b = busy/util − 1."""
    if not 0 < util_at_batch1 <= busy <= 1:
        raise ValueError("need 0 < util_at_batch1 <= busy <= 1")
    return busy / util_at_batch1 - 1.0


def kernel_share(batch: float | np.ndarray, ratio: float) -> float | np.ndarray:
    """Share of a busy instance's time spent in GPU kernels with batches of `batch`: B/(a/b + B)."""
    b = np.asarray(batch, dtype=float)
    out = b / (ratio + b)
    return float(out) if out.ndim == 0 else out


def batch_for_share(share: float, ratio: float) -> float:
    """The mean batch size that makes `kernel_share` equal `share`: share·(a/b)/(1 − share)."""
    if not 0 < share < 1:
        raise ValueError("share must be in (0, 1)")
    return share * ratio / (1.0 - share)


def compute_utilisation_at_batch(batch: float, ridge_flop_per_byte: float) -> float:
    """Reading B of "GPU utilisation": share of peak FLOP/s a bf16 decode GEMM reaches at
    batch B (≈ B FLOP per weight byte): min(1, B / ridge)."""
    if batch <= 0 or ridge_flop_per_byte <= 0:
        raise ValueError("batch and ridge must be positive")
    return min(1.0, batch / ridge_flop_per_byte)


@dataclass(frozen=True)
class EcommerceAssumptions:
    """What case 1 leaves unsaid: one server per node of `gpus_per_node` instances sharing a queue,
    Poisson arrivals, one request = one generation taking a + b·B (b = `gpu_ms_per_request`, the GPU
    idle during a), each instance `busy_before` busy before batching: a/b = busy_before/util_before − 1.
    """

    rate_qps: float = 5000.0
    gpus_per_node: int = 8
    gpu_ms_per_request: float = 100.0
    busy_before: float = 0.97
    util_before: float = 0.22
    max_batch_size: int = 8
    max_queue_delay_ms: float = 50.0
    n_requests: int = 30_000
    seed: int = 7

    @property
    def ratio(self) -> float:
        """a/b implied by `util_before` at `busy_before`."""
        return overhead_ratio(self.util_before, self.busy_before)

    @property
    def service(self) -> Affine:
        """The execution-time model a + b·B (microseconds)."""
        b = self.gpu_ms_per_request * 1e3
        return Affine(self.ratio * b, b)

    @property
    def node_rate_before(self) -> float:
        """Requests/s per node that keep every instance `busy_before` busy without batching."""
        return self.gpus_per_node * self.busy_before / self.service.time(1)

    @property
    def nodes_before(self) -> float:
        """Nodes the 5000 QPS need before batching (fractional: the simulation uses the rate)."""
        return self.rate_qps / self.node_rate_before


def _gpu_util(res: SimResult, b_s: float, warmup: float = 0.1) -> tuple[float, float]:
    """(instance busy fraction, GPU-kernel share of wall time) over the measured window."""
    r = res.records
    i0 = int(math.ceil(warmup * r.size))
    t0 = float(r["arrival"][i0])
    t1 = float(np.nanmax(r["finish"]))
    bt = res.batches
    sel = (bt["start"] >= t0) & (bt["start"] <= t1)
    span = (t1 - t0) * res.instances
    busy = float(np.clip(np.minimum(bt["end"][sel], t1) - bt["start"][sel], 0, None).sum() / span)
    kern = float(bt["size"][sel].sum() * b_s / span)
    return busy, kern


def ecommerce_scenarios(assume: EcommerceAssumptions | None = None,
                        extra_delays_ms: Sequence[float] = ()) -> list[dict[str, Any]]:
    """Simulate case 1 on one node: ``before`` (no batching), ``after_same_fleet`` (8 / 50 ms),
    ``after_third_fleet`` (nodes divided by util_after/util_before), ``after_same_fleet_delay_<d>ms``
    per extra delay; gpu_util is reading A."""
    a = assume or EcommerceAssumptions()
    svc = a.service
    b_s = a.gpu_ms_per_request * 1e-3
    k = a.gpus_per_node
    rows = []
    cut = ECOMMERCE["util_after"] / ECOMMERCE["util_before"]
    plans: list[tuple[str, float, int, float]] = [
        ("before", a.node_rate_before, 1, 0.0),
        ("after_same_fleet", a.node_rate_before, a.max_batch_size, a.max_queue_delay_ms),
        ("after_third_fleet", a.node_rate_before * cut, a.max_batch_size, a.max_queue_delay_ms),
    ]
    for d in extra_delays_ms:
        plans.append((f"after_same_fleet_delay_{d:g}ms", a.node_rate_before, a.max_batch_size, float(d)))
    for i, (name, rate, mbs, delay_ms) in enumerate(plans):
        arr = W.poisson(rate, a.n_requests, seed=a.seed + i)
        res = simulate_dynamic(arr, svc, max_batch_size=mbs, max_queue_delay_us=delay_ms * 1e3, instances=k)
        s = res.summary()
        busy, kern = _gpu_util(res, b_s)
        nodes = a.rate_qps / rate
        rows.append({
            "scenario": name, "nodes": nodes, "gpus": nodes * k, "node_rate": rate,
            "max_batch_size": mbs, "delay_ms": delay_ms,
            "p50_s": s["latency_ms"]["p50"] / 1e3, "p95_s": s["latency_ms"]["p95"] / 1e3,
            "p99_s": s["latency_ms"]["p99"] / 1e3, "mean_batch": s["batch_size_mean"],
            "busy": busy, "gpu_util": kern, "stable": s["stable"],
        })
    return rows


@dataclass(frozen=True)
class Tenant:
    """One business line: its share of the requests and its prompt/output token lengths."""

    name: str
    share: float
    prompt: LengthDist
    output: LengthDist


#: Twelve business lines, from 「你好」 to whole documents (an assumption: the article lists none).
TENANTS: tuple[Tenant, ...] = (
    Tenant("客服问答", 0.20, uniform(20, 120), capped_exponential(60, 256)),
    Tenant("搜索改写", 0.12, uniform(10, 40), uniform(5, 20)),
    Tenant("闲聊", 0.10, uniform(5, 30), capped_exponential(40, 200)),
    Tenant("评论情感", 0.10, uniform(20, 100), fixed(2)),
    Tenant("营销文案", 0.08, uniform(50, 200), capped_exponential(200, 512)),
    Tenant("翻译", 0.08, uniform(50, 300), uniform(50, 300)),
    Tenant("代码助手", 0.07, uniform(200, 1500), capped_exponential(150, 512)),
    Tenant("报表解读", 0.06, uniform(300, 800), capped_exponential(150, 400)),
    Tenant("知识库RAG", 0.07, uniform(800, 2000), capped_exponential(120, 400)),
    Tenant("文档摘要", 0.05, uniform(1000, 3000), uniform(100, 300)),
    Tenant("会议纪要", 0.04, uniform(1500, 3500), uniform(200, 500)),
    Tenant("合同审核", 0.03, uniform(2000, 4000), uniform(50, 200)),
)


def tenant_requests(tenants: Sequence[Tenant], rate_per_s: float, n: int, seed: int = 0
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Poisson arrivals, each from a tenant by share: (arrival, prompt, output, tenant index)."""
    if not tenants:
        raise ValueError("need at least one tenant")
    shares = np.asarray([t.share for t in tenants], dtype=float)
    if np.any(shares <= 0):
        raise ValueError("tenant shares must be positive")
    rng = np.random.default_rng(seed)
    arr = W.poisson(rate_per_s, n, seed=rng)
    who = rng.choice(len(tenants), size=n, p=shares / shares.sum())
    prompt = np.empty(n, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    for j, t in enumerate(tenants):
        m = who == j
        prompt[m] = t.prompt.sample(int(m.sum()), rng)
        out[m] = t.output.sample(int(m.sum()), rng)
    return arr, prompt, out, who


def padding_eta(prompt: np.ndarray, output: np.ndarray, batch: int) -> float:
    """η = Σ(p + o − 1) / Σ B·(P_max + O_max − 1) over consecutive batches of `batch` requests:
    the article's formula applied to whole generations (prompt positions + decode steps)."""
    p = np.asarray(prompt)
    o = np.asarray(output)
    n = (p.size // batch) * batch
    if n == 0:
        raise ValueError("need at least one full batch")
    p, o = p[:n].reshape(-1, batch), o[:n].reshape(-1, batch)
    useful = (p + o - 1).sum()
    padded = (batch * (p.max(axis=1) + o.max(axis=1) - 1)).sum()
    return float(useful / padded)


def saas_comparison(rate_per_s: float, n: int = 6000, max_batch_size: int = 8, max_active: int = 64,
                    delay_ms: float = 5.0, tenants: Sequence[Tenant] = TENANTS,
                    cost: TokenCost = LLM_COST, seed: int = 3) -> list[dict[str, Any]]:
    """Case 2 on one GPU: the tenant mix under static (padded) and continuous batching. Rows:
    scheduler, eta, busy, tokens_per_s, p50_s, p99_s, mean_batch, stable."""
    arr, p, o, _ = tenant_requests(tenants, rate_per_s, n, seed)
    summaries = {
        "static": simulate_static_generation(arr, p, o, cost, max_batch_size=max_batch_size,
                                             max_queue_delay_us=delay_ms * 1e3).summary(),
        "continuous": simulate_continuous(arr, p, o, cost, max_active=max_active).summary(),
    }
    return [{"scheduler": name, "eta": s["eta"], "busy": s["utilization"], "tokens_per_s": s["tokens_per_s"],
             "p50_s": s["latency_ms"]["p50"] / 1e3, "p99_s": s["latency_ms"]["p99"] / 1e3,
             "mean_batch": s["batch_size_mean"], "stable": s["stable"]} for name, s in summaries.items()]


def saas_capacity(overload_rate: float = 40.0, n: int = 3000, max_batch_size: int = 8, max_active: int = 64,
                  tenants: Sequence[Tenant] = TENANTS, cost: TokenCost = LLM_COST, seed: int = 5
                  ) -> dict[str, float]:
    """Output tokens/s each scheduler sustains when offered more than it can serve
    (`overload_rate` req/s): its capacity for this tenant mix."""
    arr, p, o, _ = tenant_requests(tenants, overload_rate, n, seed)
    st = simulate_static_generation(arr, p, o, cost, max_batch_size=max_batch_size).summary()
    co = simulate_continuous(arr, p, o, cost, max_active=max_active).summary()
    return {"static": st["tokens_per_s"], "continuous": co["tokens_per_s"],
            "static_stable": st["stable"], "continuous_stable": co["stable"]}


def per_group_latency(res: SimResult, groups: np.ndarray, names: Sequence[str],
                      warmup: float = 0.1) -> list[dict[str, Any]]:
    """p50/p99 latency and p99 TTFT (seconds) per group of requests (e.g. per tenant)."""
    r = res.records
    g = np.asarray(groups)
    if g.size != r.size:
        raise ValueError("one group label per request")
    keep = np.arange(r.size) >= math.ceil(warmup * r.size)
    keep &= ~(r["rejected"] | r["timed_out"]) & ~np.isnan(r["finish"])
    rows = []
    for j, name in enumerate(names):
        m = keep & (g == j)  # an empty group gets None for each percentile
        lat, ft = r["finish"][m] - r["arrival"][m], r["first_token"][m] - r["arrival"][m]
        rows.append({"group": name, "n": int(m.sum()), "p50_s": percentile(lat, 50), "p99_s": percentile(lat, 99),
                     "ttft_p99_s": percentile(ft, 99)})
    return rows


def fairness_experiment(rate_short: float = 2.0, rate_long: float = 0.2, n: int = 3000,
                        cost: TokenCost = LLM_COST, max_batch_size: int = 8, max_active: int = 64,
                        schedulers: Sequence[str] = ("static", "continuous"), max_num_tokens: int = 512,
                        seed: int = 11) -> list[dict[str, Any]]:
    """Short chat (「短单」) and long documents (「长单」) share one GPU, per scheduler ("static",
    "continuous", "continuous_chunked"). Rows: scheduler, tenant, n, p50_s, p99_s, ttft_p99_s.
    """
    short = Tenant("短单", rate_short, uniform(20, 80), uniform(10, 60))
    long_ = Tenant("长单", rate_long, uniform(1500, 3000), uniform(200, 400))
    arr, p, o, who = tenant_requests((short, long_), rate_short + rate_long, n, seed)
    makers = {
        "static": lambda: simulate_static_generation(arr, p, o, cost, max_batch_size=max_batch_size),
        "continuous": lambda: simulate_continuous(arr, p, o, cost, max_active=max_active),
        "continuous_chunked": lambda: simulate_continuous(arr, p, o, cost, max_active=max_active,
                                                          step_policy="chunked", max_num_tokens=max_num_tokens),
    }
    rows = []
    for name in schedulers:
        if name not in makers:
            raise ValueError(f"unknown scheduler {name!r}; choose from {', '.join(makers)}")
        res = makers[name]()
        for row in per_group_latency(res, who, ("短单", "长单")):
            rows.append({"scheduler": name, "tenant": row.pop("group"), **row})
    return rows


def text_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None,
               digits: int = 3, headers: dict[str, str] | None = None) -> str:
    """Rows of dicts as an aligned plain-text table; floats rounded to `digits` significant
    digits (so a seeded result prints identically everywhere), None as "—"."""
    if not rows:
        return "(no rows)"
    cols = list(columns or rows[0].keys())
    heads = [(headers or {}).get(c, c) for c in cols]

    def fmt(v: Any) -> str:
        if v is None:
            return "—"
        if isinstance(v, (bool, np.bool_)):
            return "是" if v else "否"
        if isinstance(v, (float, np.floating)):
            if not math.isfinite(v):
                return str(v)
            if v == 0:
                return "0"
            mag = math.floor(math.log10(abs(v)))
            dec = max(0, digits - 1 - mag)
            return f"{v:,.{dec}f}"
        if isinstance(v, (int, np.integer)):
            return f"{int(v):,}"
        return str(v)

    cells = [[fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max(map(display_width, [h, *(row[i] for row in cells)])) for i, h in enumerate(heads)]

    def line(vals: Sequence[str]) -> str:
        return "  ".join(v + " " * (w - display_width(v)) for v, w in zip(vals, widths)).rstrip()

    return "\n".join([line(heads), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def before_p95_sweep(busy_values: Sequence[float], assume: EcommerceAssumptions | None = None) -> list[dict[str, Any]]:
    """Case 1 before batching at several busy levels: how busy must the old fleet have been for a
    P95 of 6 s? Rows: busy_before, ratio (a/b), gpus, p95_s, p99_s, stable."""
    base = assume or EcommerceAssumptions()
    rows = []
    for i, bb in enumerate(busy_values):
        a = replace(base, busy_before=float(bb))
        arr = W.poisson(a.node_rate_before, a.n_requests, seed=a.seed + 100 + i)
        s = simulate_dynamic(arr, a.service, max_batch_size=1, instances=a.gpus_per_node).summary()
        rows.append({"busy_before": float(bb), "ratio": a.ratio, "gpus": a.nodes_before * a.gpus_per_node,
                     "p95_s": s["latency_ms"]["p95"] / 1e3, "p99_s": s["latency_ms"]["p99"] / 1e3,
                     "stable": s["stable"]})
    return rows


def real_fairness(server: Any, seconds: float = 5.0, rate_short: float = 6.0, rate_long: float = 0.6,
                  short: tuple[int, int] = (8, 8), long: tuple[int, int] = (120, 120), seed: int = 0,
                  models: Sequence[tuple[str, str]] = (("generate", "grpc"), ("lm_stream", "grpc-stream"))
                  ) -> list[dict[str, Any]]:
    """Short and long generations (EOS ignored) share the toy LM on the real server, once per model
    (`generate`: request-level batches; `lm_stream`: continuous batching), on one Poisson schedule."""
    rng = np.random.default_rng(seed)
    a_s = W.rate_curve([rate_short], seconds, seed=rng)
    a_l = W.rate_curve([rate_long], seconds, seed=rng)
    arr = np.concatenate([a_s, a_l])
    kind = np.concatenate([np.zeros(a_s.size, dtype=int), np.ones(a_l.size, dtype=int)])
    order = np.argsort(arr, kind="stable")
    arr, kind = arr[order], kind[order]
    prompts = [np.concatenate([[1], rng.integers(4, 200, (short, long)[k][0] - 1)]) for k in kind]
    outs = [(short, long)[k][1] for k in kind]
    rows = []
    for model, proto in models:
        def spec(i: int, batched: bool = proto != "grpc-stream") -> Any:
            return RequestSpec(generate_inputs(prompts[i], outs[i], ignore_eos=True, batched=batched))

        rec = run_open_loop(server, model, spec, arrivals=arr, protocol=proto, progress=False).records
        kk, ok = kind[rec.index], rec.ok
        for j, name in enumerate(("短单", "长单")):
            m = (kk == j) & ok
            x = rec.latency[m]
            rows.append({"model": model, "tenant": name, "n": int(m.sum()), "p50_s": percentile(x, 50),
                         "p95_s": percentile(x, 95), "max_s": float(x.max()) if x.size else None,
                         "errors": int(((kk == j) & ~ok).sum())})
    return rows
