"""Chapter 11's course module: the simulated experiments (step policies and token budget, prefix caching,
preemption, goodput, prefill/decode disaggregation), the staged lm_stream variants, and the chapter's formulas."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from batchlab import config_pbtxt as cfg
from batchlab.course import llm_serving as L
from batchlab.sim.continuous import simulate_continuous
from batchlab.sim.service import TokenCost
from batchlab.theory import formulas as F

#: A step cost for the simulated experiments (µs): the chapter calibrates its own on the server.
COST = TokenCost(prefill_per_token=200, decode_base=4500, decode_per_seq=150)


def test_formulas():
    assert F.tpot(1.2, 0.12, 61) == pytest.approx(0.018)
    assert F.prefill_steps(420, 32, 4) == 15 and F.prefill_steps(420, 512) == 1
    assert F.prefix_hit_tokens(330, 16) == 320 and F.prefix_hit_tokens(320, 16, prompt_tokens=320) == 304
    for bad in (lambda: F.tpot(1, 0, 1), lambda: F.prefill_steps(10, 4, 4), lambda: F.prefix_hit_tokens(5, 0)):
        with pytest.raises(ValueError):
            bad()


def test_token_budget_caps_the_step_and_delays_the_long_prompt():
    rows = [L.sim_mixed(m, COST) for m in (None, 128, 32)]
    c = COST
    for r in rows[1:]:  # b > c: the longest step is the whole budget spent on prompt tokens, a + b·M
        assert r["step_max_ms"] <= c.iteration_time(r["max_num_tokens"], 0) * 1e3 + 1e-9
    assert rows[0]["step_max_ms"] == pytest.approx(c.iteration_time(420, 4) * 1e3)
    assert [r["itl_p99_ms"] for r in rows] == sorted((r["itl_p99_ms"] for r in rows), reverse=True)
    assert rows[0]["long_ttft_p50_ms"] < rows[1]["long_ttft_p50_ms"] < rows[2]["long_ttft_p50_ms"]


def test_prefill_first_stalls_the_decodes_like_whole_prompts():
    first, whole = L.sim_mixed(None, COST, step_policy="prefill_first"), L.sim_mixed(None, COST)
    assert first["step_policy"] == "prefill_first" and first["itl_p99_ms"] >= whole["itl_p99_ms"] * 0.9
    assert first["itl_p99_ms"] > 2 * L.sim_mixed(32, COST)["itl_p99_ms"]


def test_prefix_caching_shares_the_blocks_of_the_shared_prefix():
    plain, r = L.sim_prefix(0, COST, n=10, gap_s=1.0), L.sim_prefix(250, COST, n=10, gap_s=1.0)
    assert plain["hit_rate"] == 0 and plain["ttft_plain_ms"] == plain["ttft_cached_ms"]
    assert r["hit_rate"] == pytest.approx(9 * 240 / (10 * 336))   # 15 whole blocks, the first request misses
    assert r["ttft_cached_ms"] < r["ttft_plain_ms"]
    # 8 at once sharing 320 tokens: 20 blocks once, not 8 times; their prompts are not recomputed
    c = L.sim_prefix(320, COST)
    assert c["peak_blocks_plain"] == 8 * 22 and c["peak_blocks_cached"] == 20 + 8 * 2
    assert c["peak_blocks_plain"] >= 4 * c["peak_blocks_cached"] and c["ttft_plain_ms"] >= 2 * c["ttft_cached_ms"]


def test_on_demand_admits_more_and_preemption_costs_recomputation():
    res, od = L.sim_preemption("reserve", COST), L.sim_preemption("on_demand", COST)
    roomy = L.sim_preemption("on_demand", COST, 2048)
    assert (res["max_active"], res["preemptions"]) == (2, 0)          # 6 blocks each in a pool of 16
    assert od["max_active"] == roomy["max_active"] == 8                # the same concurrency at the start
    assert od["preemptions"] > 0 and od["recomputed_tokens"] > 0 and roomy["preemptions"] == 0
    assert roomy["tokens_per_s"] > od["tokens_per_s"]                  # what preemption alone costs


def test_disaggregation_lowers_tpot_until_the_transfer_costs_more():
    fast, slow = L.disaggregation(6, 0, COST, n=200), L.disaggregation(6, 640, COST, n=200)
    assert fast["dis_tpot_p99_ms"] < fast["co_tpot_p99_ms"]
    assert slow["dis_tpot_p99_ms"] > slow["co_tpot_p99_ms"]
    # the transfer is paid once per stream: it adds transfer / (n − 1) to each TPOT
    assert slow["dis_tpot_p99_ms"] - fast["dis_tpot_p99_ms"] == pytest.approx(640 / 63, rel=0.05)
    assert fast["co_ttft_p99_ms"] == slow["co_ttft_p99_ms"]
    # chunked prefill, co-located, tames the ITL tail too: the baseline disaggregation must beat
    assert fast["chunked_itl_p99_ms"] < fast["co_itl_p99_ms"] / 2 and fast["dis_itl_p99_ms"] < fast["chunked_itl_p99_ms"]


def test_who_returns_the_first_token_decides_where_the_transfer_shows():
    dist, proxy = (L.disaggregation(6, 300, COST, n=200, first_token=f) for f in ("prefill", "decode"))
    base = L.disaggregation(6, 0, COST, n=200, first_token="decode")
    assert proxy["dis_ttft_p99_ms"] - base["dis_ttft_p99_ms"] == pytest.approx(300, rel=0.05)  # in TTFT
    assert proxy["dis_tpot_p99_ms"] == pytest.approx(base["dis_tpot_p99_ms"], rel=0.05)
    assert dist["dis_itl_p99_ms"] >= 300 and dist["dis_ttft_p99_ms"] < proxy["dis_ttft_p99_ms"]  # in the 2nd token
    with pytest.raises(ValueError, match="first_token"):
        L.disaggregation(6, 0, COST, n=20, first_token="client")


def test_slo_attainment_and_goodput_hand_worked():
    times = [[0.1, 0.12, 0.14], [0.5, 0.6], [2.0]]                 # ITLs 20 ms; 100 ms; none
    slo = {"ttft_ms": 1000.0, "itl_p99_ms": 50.0, "target": 0.9}
    assert L.slo_attainment([0.1, 0.5, 2.0], times, slo) == pytest.approx(1 / 3)
    rows = [{"policy": "a", "rate": r, "attainment": x} for r, x in ((1, 1.0), (2, 0.95), (3, 0.7), (4, 0.95))]
    rows += [{"policy": "b", "rate": 1, "attainment": 0.5}]
    assert L.goodput(rows, 0.9) == {"a": 2.0, "b": 0.0}           # the rate below the first miss


def test_slo_for_places_the_slos_by_the_step_cost():
    slo = L.slo_for(COST, itl_tokens=96, longest=320, ttft_factor=4, target=0.9)
    assert slo["itl_p99_ms"] == pytest.approx(4.5 + 96 * 0.2)     # a + 96·b
    assert slo["ttft_ms"] == pytest.approx(4 * (4.5 + 320 * 0.2)) and slo["target"] == 0.9
    # twice as slow a machine: twice the SLOs, half the capacity (the sweep's rates scale with it)
    slow = TokenCost(prefill_per_token=400, decode_base=9000, decode_per_seq=300)
    assert L.slo_for(slow)["itl_p99_ms"] == pytest.approx(2 * L.slo_for(COST)["itl_p99_ms"])
    assert L.capacity_rps(slow) == pytest.approx(L.capacity_rps(COST) / 2)


@pytest.mark.parametrize("cost", [COST, TokenCost(prefill_per_token=600, decode_base=6000, decode_per_seq=1500)],
                         ids=["quiet", "loaded"])
def test_chunked_steps_raise_goodput_in_the_simulator(cost):
    """The chapter's sweep: SLOs and rates set from the machine's cost, so the ranking holds on any."""
    slo = L.slo_for(cost)
    rows = L.sim_goodput(L.capacity_rps(cost) * np.arange(1, 10) / 10, cost, slo, n=150)
    g = L.goodput(rows, slo["target"])
    assert set(g) == set(L.STEP_SETTINGS)
    assert g["chunked 32"] >= 1.2 * max(g["whole"], g["prefill_first"]) > 0
    assert g["chunked 128"] < g["chunked 32"]           # its step (≈ a + 128·b) is longer than the ITL SLO


def _fake_stream(cost: TokenCost, step_policy: str = "mixed", max_num_tokens: int | None = None):
    """A `stream_requests` stand-in: the simulator (priced by `cost`) plays the server; every token's
    T_NS is the end of its step (ACTIVE: the sequences in it), and the client gets it 0.5 ms later."""
    def stream(server, model, prompts, outs, arrivals, **kw):
        arr = np.asarray(arrivals, float)
        res = simulate_continuous(arr, [len(p) for p in prompts], outs, cost, max_active=8, warmup=0.0,
                                  record_token_times=True, step_policy=step_policy, max_num_tokens=max_num_tokens)
        times = res.extra["token_times"]
        active = {float(e): int(n) for e, n in zip(res.batches["end"], res.batches["size"])}   # the step's ACTIVE
        figures = [[{"T_NS": int(round(t * 1e9)), "ACTIVE": active[t]} for t in ts] for ts in times]
        client = [[t + 5e-4 for t in ts] for ts in times]
        server_times = L.on_client_clock(client, [[f["T_NS"] / 1e9 for f in fs] for fs in figures])
        return SimpleNamespace(figures=figures, token_times=client, server_times=server_times, sent=arr,
                               server_ttft=np.array([s[0] for s in server_times]) - arr,
                               tokens=np.array([len(t) for t in times]), last=np.array([t[-1] for t in client]))
    return stream


def test_calibrate_cost_reads_the_step_cost_back_from_the_steps(monkeypatch):
    """Played by a simulator priced with a known cost, the calibration load gives that cost back: the
    steps are read from T_NS alone (which tokens share a step, which is a first token)."""
    cost = TokenCost(prefill_per_token=700, decode_base=6000, decode_per_seq=1200)
    monkeypatch.setattr(L, "stream_requests", _fake_stream(cost))
    got, steps = L.calibrate_cost(None)
    assert np.unique(steps[steps[:, 1] == 0, 0]).size >= 4 and (steps[:, 1] >= 96).sum() >= 3
    for k in ("prefill_per_token", "decode_base", "decode_per_seq"):
        assert getattr(got, k) == pytest.approx(getattr(cost, k), rel=1e-3), k


@pytest.mark.parametrize("policy, budget", [("mixed", None), ("chunked", 32), ("chunked", 128)])
def test_mixed_round_counts_the_steps_a_long_prompt_waits(monkeypatch, policy, budget):
    """In steps, a long prompt's prefill, from its admission to its first token, is ⌈P/(M − d)⌉ (1 whole)."""
    cost = TokenCost(prefill_per_token=600, decode_base=6000, decode_per_seq=1200)
    monkeypatch.setattr(L, "stream_requests", _fake_stream(cost, policy, budget))
    spacing = 1.2 * F.prefill_steps(320, 32, 4) * cost.iteration_time(28, 4)   # the chapter's load
    r = L.mixed_round(None, "m", decode_tokens=48, long_prompt=320, long_at=(0.03, 0.03 + spacing))
    assert r["long_prefill_steps"] == (F.prefill_steps(320, budget, 4) if budget else 1)


def test_fit_cost_takes_medians_and_says_what_is_missing():
    a, b, c = 6000.0, 700.0, 1200.0
    rows = [(d, 0, (a + c * d) / 1e6) for d in (1, 2, 3, 4) for _ in range(5)]
    rows += [(2, 0, 0.5), (3, 0, 0.4)]                                 # two steps a busy machine stretched
    rows += [(4, p, (a + c * 4 + b * p) / 1e6) for p in (96, 200, 320)] + [(4, 8, 1.0)]   # short prompt: unused
    got = L.fit_cost(np.array(rows))
    assert (got.decode_base, got.decode_per_seq, got.prefill_per_token) == pytest.approx((a, c, b))
    with pytest.raises(ValueError, match="two"):
        L.fit_cost(np.array([(3, 0, 0.01), (3, 0, 0.01), (3, 200, 0.1)]))


def test_whole_prompt_steps_times_only_back_to_back_steps():
    # request 0 decodes through steps 1-3; request 1 (prompt 100) joins at step 2; request 2 comes after an idle gap
    figures = [[{"T_NS": 10}, {"T_NS": 30}, {"T_NS": 60}], [{"T_NS": 30}, {"T_NS": 60}], [{"T_NS": 500}]]
    steps = L.whole_prompt_steps(SimpleNamespace(figures=figures), [8, 100, 50])
    assert steps.tolist() == [[1, 100, 20e-9], [2, 0, 30e-9]]


def test_on_client_clock_shifts_by_the_fastest_transit():
    client = [[10.002, 10.010], [10.020]]
    server = [[1.000, 1.007], [1.0195]]                                 # transits 2, 3 and 0.5 ms
    moved = L.on_client_clock(client, server)
    assert moved[0] == pytest.approx([10.0005, 10.0075]) and moved[1] == pytest.approx([10.02])
    assert L.on_client_clock([None], [[]]) == [[]]


def test_slo_round_predicts_with_the_simulator_for_the_very_send_times(monkeypatch):
    """A server that is the simulator: the attainment it measures is the one predicted."""
    cost = TokenCost(prefill_per_token=600, decode_base=6000, decode_per_seq=1200)
    slo = L.slo_for(cost)
    monkeypatch.setattr(L, "stream_requests", _fake_stream(cost, "chunked", 32))
    r = L.slo_round(None, "lm_chunk32", 3.0, cost, slo, n=12)
    assert r["policy"] == "chunked 32" and r["attainment"] == pytest.approx(r["predicted"])


def test_stage_variants_writes_each_knob(tmp_path):
    L.stage_variants(tmp_path, {"lm_a": {"max_num_tokens": "32", "step_policy": "chunked"}})
    params = cfg.parse_config((tmp_path / "lm_a" / "config.pbtxt").read_text()).parameters
    assert params["max_num_tokens"].string_value == "32" and params["step_policy"].string_value == "chunked"
    assert params["max_prompt_tokens"].string_value == "480"
    assert (tmp_path / "lm_a" / "1" / "model.py").is_file()


def test_token_prompt_is_seeded_and_starts_with_bos():
    a, b = L.token_prompt(20, 1), L.token_prompt(20, 2)
    assert a[0] == 1 and a.size == 20 and (a == L.token_prompt(20, 1)).all() and not (a == b).all()
    assert math.isfinite(float(a.sum()))


def test_median_spread_per_model():
    rows = [{"model": "a", "x": 3}, {"model": "b", "x": 1}, {"model": "a", "x": 1}, {"model": "a", "x": 2}]
    assert L.median_spread(rows, "x") == {"a": (2.0, 1.0, 3.0), "b": (1.0, 1.0, 1.0)}


def test_round_ratios_pair_the_models_round_by_round():
    rows = [{"round": 0, "model": "a", "x": 4.0}, {"round": 0, "model": "b", "x": 2.0},
            {"round": 1, "model": "a", "x": 9.0}, {"round": 1, "model": "b", "x": 3.0}, {"round": 2, "model": "a", "x": 1.0}]
    assert L.round_ratios(rows, "x", "a", "b") == [2.0, 3.0]


def test_mixed_round_takes_itl_from_the_server_stamps(monkeypatch):
    """The decoders' ITL comes from T_NS (server_times); a client stall shows only in the client column."""
    def fake(server, model, prompts, outs, arrivals, check=None, stamps=True):
        n = len(prompts)
        server_t = [list(np.arange(m) * 0.010) for m in outs]                # one token every 10 ms
        client_t = [list(np.arange(m) * 0.010 + 0.001) for m in outs]
        for t in client_t[:4]:                                               # one 200 ms client stall
            t[5:] = [x + 0.2 for x in t[5:]]
        return SimpleNamespace(token_times=client_t, server_times=server_t if stamps else [[] for _ in range(n)],
                               sent=np.zeros(n), last=np.array([t[-1] for t in client_t]),
                               server_ttft=np.array([t[0] for t in server_t]),
                               figures=[[{"T_NS": int(t * 1e9), "ACTIVE": 4 + (i >= 4)} for t in ts]
                                        for i, ts in enumerate(server_t)])

    monkeypatch.setattr(L, "stream_requests", fake)
    r = L.mixed_round(None, "m")
    assert r["long_ttft_p50_ms"] == pytest.approx(0.0)                     # from the server's first stamp
    assert r["itl_p99_ms"] == pytest.approx(10.0) and r["client_itl_p99_ms"] > 100
    monkeypatch.setattr(L, "stream_requests", lambda *a, **k: fake(*a, stamps=False))
    with pytest.raises(RuntimeError, match="sends no T_NS"):
        L.mixed_round(None, "m")


def test_the_rounds_read_the_servers_own_figures(monkeypatch):
    """prefix_round and preemption_round take blocks, hits, preemptions and recomputation from what
    lm_stream reported, step by step (deduplicated by T_NS) and in each request's final response."""
    def fake(server, model, prompts, outs, arrivals, **kw):
        n = len(prompts)
        figures = [[{"T_NS": 10, "ACTIVE": n, "KV_BLOCKS": 21 + i, "KV_TOKENS": 300},
                    {"T_NS": 20 + i, "ACTIVE": 1, "KV_BLOCKS": 2, "KV_TOKENS": 20, "CACHED_TOKENS": 320 * (i > 0),
                     "PREEMPTIONS": i % 2, "RECOMPUTED_TOKENS": 5 * (i % 2)}] for i in range(n)]
        return SimpleNamespace(figures=figures, token_times=[[0.1, 0.2]] * n, sent=np.zeros(n),
                               server_times=[[0.1, 0.2]] * n, server_ttft=np.full(n, 0.1),
                               last=np.full(n, 0.2), tokens=np.full(n, 2))

    monkeypatch.setattr(L, "stream_requests", fake)
    r = L.prefix_round(None, "m", n=4)
    assert (r["peak_kv_blocks"], r["cached_tokens"]) == (21, 3 * 320)   # the first T_NS=10 report is kept
    p = L.preemption_round(None, "m", n=4)
    assert (p["preemptions"], p["recomputed_tokens"], p["max_active"]) == (2, 10, 4)
