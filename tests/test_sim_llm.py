"""LLM schedulers: request-level (static, padded) batching vs continuous (iteration-level) batching."""

import numpy as np
import pytest

from batchlab.sim import workload as wl
from batchlab.sim.continuous import simulate_continuous
from batchlab.sim.service import Affine, TokenCost
from batchlab.sim.static_generation import simulate_static_generation

COST = TokenCost(prefill_per_token=20, decode_base=8000, decode_per_seq=100)


@pytest.fixture(scope="module")
def offline_batch():
    """1,024 requests all queued at t=0 with mixed prompt (32..512) and output (1..512) lengths."""
    n = 1024
    return np.zeros(n), wl.uniform(32, 512).sample(n, 1), wl.uniform(1, 512).sample(n, 2)


def test_eta_continuous_near_one_static_near_half(offline_batch):
    a, p, o = offline_batch
    st = simulate_static_generation(a, p, o, COST, max_batch_size=16).summary(warmup=0)
    ct = simulate_continuous(a, p, o, COST, max_active=16).summary(warmup=0)
    assert 0.45 <= st["eta"] <= 0.6  # padding to the longest prompt and the longest output
    assert ct["eta"] == 1.0 and ct["preemptions"] == 0
    # same useful work, less computed: continuous batching turns η into throughput
    assert ct["tokens_per_s"] > 1.7 * st["tokens_per_s"]
    # η is the article's Σ L_i / (B · L_max), summed over batches
    useful = (p + o - 1).sum()
    st_res = simulate_static_generation(a, p, o, COST, max_batch_size=16)
    b = st_res.batches
    assert b["useful_tokens"].sum() == useful
    assert b["executed_tokens"].sum() == sum(
        int(len(ix)) * (p[ix].max() + o[ix].max() - 1)
        for ix in (np.flatnonzero(st_res.records["batch_id"] == k) for k in range(b.size)))


def test_recompute_preemption_costs_eta_but_not_much(offline_batch):
    a, p, o = offline_batch
    res = simulate_continuous(a, p, o, COST, max_active=16, kv_token_budget=8500, kv_policy="on_demand")
    s = res.summary(warmup=0)
    assert s["preemptions"] > 0
    assert 0.95 <= s["eta"] < 1.0
    assert s["kv_high_water"] <= 8500
    assert s["completed"] == a.size  # nobody is lost: evicted sequences are recomputed
    assert res.records["preemptions"].sum() == s["preemptions"]


def test_single_request_timing_is_exact_and_both_models_agree():
    cost = TokenCost(prefill_per_token=10, decode_base=1000, decode_per_seq=50, context_per_token=0.5)
    p, o = 100, 5
    expect_ttft = cost.iteration_time(p, 0, 0)
    expect_end = expect_ttft + sum(cost.iteration_time(0, 1, p + k) for k in range(1, o))
    c = simulate_continuous([0.0], [p], [o], cost, max_active=4).records[0]
    s = simulate_static_generation([0.0], [p], [o], cost, max_batch_size=4).records[0]
    for r in (c, s):
        assert r["first_token"] == pytest.approx(expect_ttft, rel=1e-12)
        assert r["finish"] == pytest.approx(expect_end, rel=1e-12)


def test_a_finished_sequence_is_replaced_at_the_next_iteration():
    # A is long, B short, C waits for a slot (max_active=2): C starts the iteration B leaves
    res = simulate_continuous([0.0, 0.0, 0.0], [10, 10, 10], [200, 3, 5], COST, max_active=2)
    r = res.records
    assert r["start"][2] == pytest.approx(r["finish"][1])
    assert r["start"][2] < r["finish"][0]  # joined while A was still running
    assert res.batches["size"].max() == 2


def test_chunked_prefill_respects_token_budget_and_bounds_iteration_time():
    n = 300
    a = wl.poisson(4.0, n, seed=3)
    p = wl.uniform(200, 2000).sample(n, 4)
    o = wl.capped_exponential(150, 600).sample(n, 5)
    res = simulate_continuous(a, p, o, COST, max_active=32, step_policy="chunked", max_num_tokens=512)
    b = res.batches
    assert b["executed_tokens"].max() <= 512
    assert b["size"].max() <= 32
    whole = simulate_continuous(a, p, o, COST, max_active=32, max_num_tokens=2048)
    # without chunks an iteration carrying a 2,000-token prompt stalls every decoding sequence
    assert whole.batches["executed_tokens"].max() > 1500
    assert (b["end"] - b["start"]).max() < (whole.batches["end"] - whole.batches["start"]).max()
    r = res.records
    assert np.all(r["start"] <= r["first_token"]) and np.all(r["first_token"] <= r["finish"])
    assert res.summary()["eta"] == 1.0


def test_kv_reserve_policy_never_exceeds_budget():
    n = 400
    a = wl.poisson(20.0, n, seed=6)
    p, o = wl.uniform(64, 256).sample(n, 7), wl.uniform(16, 256).sample(n, 8)
    res = simulate_continuous(a, p, o, COST, max_active=64, kv_token_budget=4000, kv_policy="reserve")
    s = res.summary(warmup=0)
    assert s["kv_high_water"] <= 4000 and s["preemptions"] == 0
    # the budget, not max_active, limits concurrency here
    assert res.batches["size"].max() < 64


def test_static_early_return():
    a, p, o = np.zeros(4), np.full(4, 50), np.array([2, 10, 40, 80])
    late = simulate_static_generation(a, p, o, COST, 4).records
    early = simulate_static_generation(a, p, o, COST, 4, early_return=True).records
    assert np.all(late["finish"] == late["finish"][0])
    assert np.all(np.diff(early["finish"]) > 0) and early["finish"][-1] == pytest.approx(late["finish"][0])
    assert np.all(early["first_token"] == late["first_token"])


def test_overload_flags_unstable_and_light_load_stable():
    n = 2000
    p, o = wl.uniform(32, 512).sample(n, 10), wl.uniform(8, 512).sample(n, 11)
    heavy = simulate_continuous(wl.poisson(15.0, n, seed=12), p, o, COST, max_active=32).summary()
    light = simulate_continuous(wl.poisson(4.0, n, seed=12), p, o, COST, max_active=32).summary()
    assert heavy["stable"] is False and light["stable"] is True
    assert light["ttft_ms"]["p50"] < heavy["ttft_ms"]["p50"]


@pytest.mark.parametrize("kwargs, msg", [
    (dict(kv_token_budget=100), "needs .* KV tokens"),
    (dict(step_policy="chunked"), "needs max_num_tokens"),
    (dict(step_policy="whole"), "step_policy"),
    (dict(max_num_tokens=64), "exceeds max_num_tokens"),
    (dict(kv_policy="lru"), "kv_policy"),
    (dict(max_active=0), "max_active"),
])
def test_continuous_argument_errors(kwargs, msg):
    args = dict(max_active=4)
    args.update(kwargs)
    with pytest.raises(ValueError, match=msg):
        simulate_continuous([0.0, 1.0], [100, 10], [50, 5], COST, **args)


def test_static_argument_errors():
    with pytest.raises(ValueError, match="output_tokens must be >= 1"):
        simulate_static_generation([0.0], [10], [0], COST, 4)
    with pytest.raises(ValueError, match="TokenCost"):
        simulate_static_generation([0.0], [10], [1], object(), 4)


def test_continuous_simulator_refuses_a_batch_level_model() -> None:
    with pytest.raises(ValueError, match="TokenCost"):
        simulate_continuous([0.0], [9], [3], Affine(100, 10), max_active=8)
