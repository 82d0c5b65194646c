"""The chapter-00 scenario: one stream of generation requests served three ways, side by side.

The same seeded requests (Poisson arrivals, prompt and output lengths) go to

* **不合批** (no batching): request-level generation with ``max_batch_size = 1``;
* **动态批处理** (拼锅): Triton's dynamic batcher forming request-level batches
  (``max_batch_size``, ``max_queue_delay``); a batch decodes until its longest member is done;
* **连续批处理** (同锅同煮): iteration-level batching with ``max_active`` = the same pot size.

All three run on `batchlab.sim` with one `TokenCost`; this module only chooses the workload and
builds the lanes (`batchlab.viz.frames`) the animation draws.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from batchlab._validate import positive
from batchlab.sim import Affine, TokenCost, simulate_continuous, simulate_dynamic, simulate_static_generation
from batchlab.sim import lengths as L
from batchlab.sim import workload as W
from batchlab.viz.frames import Lane, lane_from_result, lane_summary

DEMO_COST = TokenCost(prefill_per_token=200.0, decode_base=20_000.0, decode_per_seq=1_000.0)
"""The demo's GPU, in microseconds: every forward pass pays 20 ms (reading the weights), each
sequence decoding in it 1 ms more, each prompt token 0.2 ms. Decode is memory-bound: one
sequence alone costs 21 ms a step, eight together 28 ms — the pot is nearly free to fill."""

LANE_NAMES = ("不合批", "动态批处理（拼锅）", "连续批处理（同锅同煮）")


@dataclass(frozen=True)
class DemoParams:
    """The slider values of the chapter-00 animation."""

    rate: float = 4.0
    """Arrivals per second (Poisson)."""
    max_batch_size: int = 8
    """Pot size: max_batch_size of the dynamic batcher and max_active of continuous batching."""
    max_queue_delay_ms: float = 200.0
    """The dynamic batcher's time window (max_queue_delay_microseconds / 1000)."""
    n_requests: int = 40
    prompt_range: tuple[int, int] = (8, 32)
    output_range: tuple[int, int] = (4, 40)
    seed: int = 7

    def __post_init__(self) -> None:
        positive("rate", self.rate)
        if not isinstance(self.max_batch_size, (int, np.integer)) or not 1 <= self.max_batch_size <= 64:
            raise ValueError(f"max_batch_size must be an integer in [1, 64], got {self.max_batch_size!r}")
        if not (np.isfinite(self.max_queue_delay_ms) and self.max_queue_delay_ms >= 0):
            raise ValueError(f"max_queue_delay_ms must be >= 0, got {self.max_queue_delay_ms!r}")
        if not isinstance(self.n_requests, (int, np.integer)) or not 1 <= self.n_requests <= 2000:
            raise ValueError(f"n_requests must be an integer in [1, 2000], got {self.n_requests!r}")


def demo_requests(params: DemoParams) -> W.Requests:
    """The seeded request stream: arrival times and prompt / output token counts."""
    arrivals = W.poisson(params.rate, params.n_requests, seed=params.seed)
    return W.with_lengths(arrivals, L.uniform(*params.prompt_range), L.uniform(*params.output_range),
                          seed=params.seed + 1)


def run_demo(params: DemoParams = DemoParams(), cost: TokenCost = DEMO_COST,
             names: Sequence[str] = LANE_NAMES) -> list[Lane]:
    """Simulate the three schedulers on the same requests; return their lanes in display order."""
    req = demo_requests(params)
    m = int(params.max_batch_size)
    common = (req.arrival, req.prompt_tokens, req.output_tokens, cost)
    nob = simulate_static_generation(*common, max_batch_size=1)
    dyn = simulate_static_generation(*common, max_batch_size=m,
                                     max_queue_delay_us=params.max_queue_delay_ms * 1000.0)
    con = simulate_continuous(*common, max_active=m)
    return [
        lane_from_result(nob, names[0], slots=m, delay_s=0.0),
        lane_from_result(dyn, names[1], slots=m, delay_s=params.max_queue_delay_ms / 1000.0),
        lane_from_result(con, names[2], slots=m, delay_s=0.0),
    ]


def utilization_sweep(rates: Sequence[float], params: DemoParams = DemoParams(n_requests=400, seed=3),
                      cost: TokenCost = DEMO_COST, warmup: float = 0.1) -> list[dict[str, float]]:
    """Busy, fill, η, mean batch and mean latency of the three lanes at each arrival rate.

    Measured over the arrivals' span after the first ``warmup`` fraction of requests (so an
    overloaded lane's endless drain does not count). One row per (rate, lane).
    """
    rows = []
    for rate in rates:
        lanes = run_demo(replace(params, rate=float(rate)), cost)
        a = lanes[0].arrival
        t0, t1 = float(a[int(warmup * (a.size - 1))]), float(a.max())
        for k, lane in enumerate(lanes):
            s = lane_summary(lane, t0, t1)
            rows.append({"rate": float(rate), "lane": k, "name": lane.name, **s})
    return rows


STATELESS_COST = Affine(base_us=20_000.0, per_item_us=1_000.0)
"""The same GPU serving one-step (stateless) requests, e.g. embeddings: t(B) = 20 ms + 1 ms·B."""


def stateless_sweep(rates: Sequence[float], max_batch_size: int = 8, n_requests: int = 2000, seed: int = 3,
                    service: Affine = STATELESS_COST, warmup: float = 0.1) -> list[dict[str, float]]:
    """Busy and fill of a stateless model without and with dynamic batching (delay 0) per rate.

    No padding here: every request in a batch is needed work, so the fill of a saturated
    batched server approaches 1. One row per (rate, lane); lane 0 no batching, lane 1 batching.
    """
    rows = []
    for rate in rates:
        a = W.poisson(float(rate), n_requests, seed=seed)
        t0, t1 = float(a[int(warmup * (a.size - 1))]), float(a.max())
        runs = (simulate_dynamic(a, service, max_batch_size=1), simulate_dynamic(a, service, max_batch_size=max_batch_size))
        for k, res in enumerate(runs):
            lane = lane_from_result(res, ("不合批", "动态批处理")[k], slots=max_batch_size, delay_s=0.0)
            rows.append({"rate": float(rate), "lane": k, "name": lane.name, **lane_summary(lane, t0, t1)})
    return rows
