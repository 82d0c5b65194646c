"""The chapter-00 scenario: one seeded stream of generation requests served three ways on
`batchlab.sim` with one `TokenCost`: no batching, dynamic batching, continuous batching (`LANE_NAMES`)."""

from dataclasses import dataclass, replace
from typing import Sequence

from batchlab._validate import integer, non_negative, positive
from batchlab.sim import Affine, TokenCost, simulate_continuous, simulate_dynamic, simulate_static_generation
from batchlab.sim import lengths as L
from batchlab.sim import workload as W
from batchlab.viz.frames import Lane, lane_from_result, lane_summary

#: The demo's GPU (µs): a forward pass costs 20 ms, each sequence in it 1 ms more, each prompt token 0.2 ms.
DEMO_COST = TokenCost(prefill_per_token=200.0, decode_base=20_000.0, decode_per_seq=1_000.0)

LANE_NAMES = ("不合批", "动态批处理（拼锅）", "连续批处理（同锅同煮）")


@dataclass(frozen=True)
class DemoParams:
    """The slider values of the chapter-00 animation: Poisson arrivals per second, the pot size
    (max_batch_size and max_active), the dynamic batcher's time window (ms)."""

    rate: float = 4.0
    max_batch_size: int = 8
    max_queue_delay_ms: float = 200.0
    n_requests: int = 40
    prompt_range: tuple[int, int] = (8, 32)
    output_range: tuple[int, int] = (4, 40)
    seed: int = 7

    def __post_init__(self) -> None:
        positive("rate", self.rate)
        integer("max_batch_size", self.max_batch_size, 1, 64)
        non_negative("max_queue_delay_ms", self.max_queue_delay_ms)
        integer("n_requests", self.n_requests, 1, 2000)


def run_demo(params: DemoParams = DemoParams(), cost: TokenCost = DEMO_COST) -> list[Lane]:
    """Simulate the three schedulers on the same requests; return their lanes in display order."""
    req = W.with_lengths(W.poisson(params.rate, params.n_requests, seed=params.seed),
                         L.uniform(*params.prompt_range), L.uniform(*params.output_range), seed=params.seed + 1)
    m = int(params.max_batch_size)
    common = (req.arrival, req.prompt_tokens, req.output_tokens, cost)
    runs = (simulate_static_generation(*common, max_batch_size=1),
            simulate_static_generation(*common, max_batch_size=m, max_queue_delay_us=params.max_queue_delay_ms * 1000.0),
            simulate_continuous(*common, max_active=m))
    delays = (0.0, params.max_queue_delay_ms / 1000.0, 0.0)
    return [lane_from_result(r, name, slots=m, delay_s=d) for r, name, d in zip(runs, LANE_NAMES, delays)]


def _summaries(rate: float, lanes: Sequence[Lane], warmup: float) -> list[dict[str, float]]:
    """One row per lane: `lane_summary` over the arrivals after the first `warmup` fraction (an
    overloaded lane's endless drain does not count)."""
    a = lanes[0].arrival
    t0, t1 = float(a[int(warmup * (a.size - 1))]), float(a.max())
    return [{"rate": float(rate), "lane": k, "name": lane.name, **lane_summary(lane, t0, t1)}
            for k, lane in enumerate(lanes)]


def utilization_sweep(rates: Sequence[float], params: DemoParams = DemoParams(n_requests=400, seed=3),
                      cost: TokenCost = DEMO_COST, warmup: float = 0.1) -> list[dict[str, float]]:
    """One row per (rate, lane): `lane_summary` of the three lanes of `run_demo` at that rate."""
    return [row for rate in rates
            for row in _summaries(rate, run_demo(replace(params, rate=float(rate)), cost), warmup)]


#: The same GPU serving one-step (stateless) requests, e.g. embeddings: t(B) = 20 ms + 1 ms·B.
STATELESS_COST = Affine(base_us=20_000.0, per_item_us=1_000.0)


def stateless_sweep(rates: Sequence[float], max_batch_size: int = 8, n_requests: int = 2000, seed: int = 3,
                    service: Affine = STATELESS_COST, warmup: float = 0.1) -> list[dict[str, float]]:
    """One row per (rate, lane): `lane_summary` of a stateless model without (lane 0) and with
    (lane 1) dynamic batching, delay 0."""
    rows = []
    for rate in rates:
        a = W.poisson(float(rate), n_requests, seed=seed)
        runs = {"不合批": simulate_dynamic(a, service, max_batch_size=1),
                "动态批处理": simulate_dynamic(a, service, max_batch_size=max_batch_size)}
        lanes = [lane_from_result(res, name, slots=max_batch_size, delay_s=0.0) for name, res in runs.items()]
        rows += _summaries(rate, lanes, warmup)
    return rows
