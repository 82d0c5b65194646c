"""`bench fidelity-cb` (simulator vs lm_stream): the step rebuild, the cost fit, the comparison.

Synthetic client records stand in for a server run: a scripted continuous-batching engine with a
known step cost emits tokens the way lm_stream does, and the rebuild + fit must recover it.
"""

from __future__ import annotations

import numpy as np
import pytest

from batchlab.bench import fidelity_cb as fcb
from batchlab.bench.__main__ import main
from batchlab.sim.service import DecodeTableCost, TokenCost

TRUE = TokenCost(prefill_per_token=40.0, decode_base=1500.0, decode_per_seq=300.0, context_per_token=2.0)


def engine_records(arrivals, prompts, outputs, cost=TRUE, max_active=8, jitter_us=0.0, seed=0,
                   delivery_s=0.0002):
    """Run a scripted FCFS engine; return (token_times, rows, prompt_len) as the client would see them."""
    rng = np.random.default_rng(seed)
    n = len(arrivals)
    times = {i: [] for i in range(n)}
    rows = {i: [] for i in range(n)}
    gen = [0] * n
    waiting, active = [], []
    t, nxt = 0.0, 0
    while nxt < n or waiting or active:
        while nxt < n and arrivals[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        if not waiting and not active:
            t = arrivals[nxt]
            continue
        while waiting and len(active) < max_active:
            active.append(waiting.pop(0))
        pre = [r for r in active if gen[r] == 0]
        dec = [r for r in active if gen[r] > 0]
        dt = cost.iteration_time(sum(prompts[r] for r in pre), len(dec), sum(prompts[r] + gen[r] for r in dec))
        t += dt + rng.normal(0, jitter_us) * 1e-6 if jitter_us else dt
        kv = sum(prompts[r] + gen[r] for r in active)
        for j, r in enumerate(active):
            times[r].append(t + delivery_s + j * 1e-5)
            rows[r].append((gen[r], len(active), len(waiting), kv))
            gen[r] += 1
        active = [r for r in active if gen[r] < outputs[r]]
    return times, {i: np.array(v) for i, v in rows.items()}, dict(enumerate(prompts))


def poisson_workload(seed, n, max_output):
    """Poisson arrivals at 60/s, prompts of 9-25 tokens, outputs of 1..max_output-1 tokens."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / 60.0, n))
    return (arrivals, [int(x) for x in rng.integers(9, 26, n)], [int(x) for x in rng.integers(1, max_output, n)])


def test_rebuild_and_fit_recover_a_known_step_cost():
    arrivals, prompts, outputs = poisson_workload(1, 300, 60)
    times, rows, plen = engine_records(arrivals, prompts, outputs)
    steps = fcb.rebuild_steps(times, rows, plen)
    assert steps["timed"].sum() > 0.8 * steps["t"].size
    assert steps["active"].max() > 4  # the load made real batches
    fit = fcb.fit_step_cost(steps)
    c = fit["cost"]
    assert c.decode_base == pytest.approx(TRUE.decode_base, rel=0.02)
    assert c.decode_per_seq == pytest.approx(TRUE.decode_per_seq, rel=0.02)
    assert c.prefill_per_token == pytest.approx(TRUE.prefill_per_token, rel=0.05)
    assert c.context_per_token == pytest.approx(TRUE.context_per_token, rel=0.1)


def test_rebuild_times_only_back_to_back_steps():
    # one request alone, arriving twice with an idle gap: the first step after the gap is not timed
    times, rows, plen = engine_records(np.array([0.0, 1.0]), [10, 10], [3, 3])
    steps = fcb.rebuild_steps(times, rows, plen)
    assert steps["t"].size == 6
    assert steps["timed"].tolist() == [False, True, True, False, True, True]
    assert steps["prefill_tokens"].tolist() == [10, 0, 0, 10, 0, 0]
    assert steps["context_tokens"].tolist() == [0, 11, 12, 0, 11, 12]


def test_rebuild_drops_steps_with_missing_tokens():
    times, rows, plen = engine_records(np.array([0.0, 0.0]), [10, 12], [4, 4])
    full = fcb.rebuild_steps(times, rows, plen)
    del times[1], rows[1]  # the client lost request 1: its steps no longer hold ACTIVE tokens
    part = fcb.rebuild_steps(times, rows, plen)
    assert full["t"].size == 4 and part["t"].size == 0


def test_fit_refuses_too_few_steps():
    times, rows, plen = engine_records(np.array([0.0]), [10], [3])
    with pytest.raises(ValueError, match="too few"):
        fcb.fit_step_cost(fcb.rebuild_steps(times, rows, plen))


def test_fit_keeps_costs_non_negative():
    rng = np.random.default_rng(2)
    m = 200
    steps = {"timed": np.ones(m, bool), "duration": 2e-3 + rng.normal(0, 1e-5, m),
             "decode_seqs": rng.integers(1, 9, m).astype(float), "prefill_seqs": np.zeros(m),
             "prefill_tokens": np.zeros(m), "context_tokens": rng.integers(10, 500, m).astype(float)}
    fit = fcb.fit_step_cost(steps)
    assert all(v >= 0 for v in fit["coef_us"].values())
    assert fit["cost"].decode_base == pytest.approx(2000, rel=0.05)


def test_fit_prices_each_well_measured_size_by_its_own_mean():
    # A concave engine: 1 ms, 1.2 ms, 2.4 ms for 1, 2, 3 sequences (no line through all three), size 4 rare.
    truth = {1: 1000.0, 2: 1200.0, 3: 2400.0, 4: 2600.0}
    sizes = np.array([1] * 60 + [2] * 60 + [3] * 60 + [4] * 3)
    steps = {"timed": np.ones(sizes.size, bool), "duration": np.array([truth[n] for n in sizes]) * 1e-6,
             "decode_seqs": sizes.astype(float), "prefill_seqs": np.zeros(sizes.size),
             "prefill_tokens": np.zeros(sizes.size), "context_tokens": np.zeros(sizes.size)}
    fit = fcb.fit_step_cost(steps)
    cost, linear = fit["cost"], fit["linear_cost"]
    for n in (1, 2, 3):
        assert cost.iteration_time(0, n) == pytest.approx(truth[n] * 1e-6, rel=1e-6)
    assert abs(linear.iteration_time(0, 2) - truth[2] * 1e-6) > 0.1 * truth[2] * 1e-6  # the line misses size 2
    assert fit["decode_table_us"] == pytest.approx([1000.0, 1200.0, 2400.0])  # size 4: too few steps, linear
    assert fit["decode_only_steps_by_size"]["2"]["table_us"] == pytest.approx(1200.0)


def test_compare_and_predicted_ttft():
    out = fcb.compare({"tokens_per_s": 105, "ttft_p50": 13, "ttft_p99": 50},
                      {"tokens_per_s": 100, "ttft_p50": 10, "ttft_p99": 50})
    assert out["error"] == {"tokens_per_s": 0.05, "ttft_p50": 0.3, "ttft_p99": 0.0}
    assert out["within_goal"] == {"tokens_per_s": True, "ttft_p50": False, "ttft_p99": True}
    p = fcb.predicted_ttft_ms(np.full(1000, 0.010), np.array([0.002]))
    assert p == {"ttft_p50": pytest.approx(12.0), "ttft_p99": pytest.approx(12.0)}
    with pytest.raises(ValueError):
        fcb.predicted_ttft_ms(np.array([]), np.array([0.001]))


def test_predicted_ttft_draws_from_the_pool_of_each_arrival():
    t = np.full(1000, 0.010)
    idle = np.arange(1000) < 300  # 30 % arrive at an idle engine
    pools = {"idle": np.array([0.006]), "busy": np.array([0.001])}
    p = fcb.predicted_ttft_ms(t, pools, idle=idle)
    assert p == {"ttft_p50": pytest.approx(11.0), "ttft_p99": pytest.approx(16.0)}
    # an empty pool falls back to both pools together
    p = fcb.predicted_ttft_ms(t, {"idle": np.array([]), "busy": np.array([0.001])}, idle=np.ones(1000, bool))
    assert p["ttft_p50"] == pytest.approx(11.0)
    with pytest.raises(ValueError, match="idle mask has 3 entries for 1000"):
        fcb.predicted_ttft_ms(t, pools, idle=np.ones(3, bool))
    with pytest.raises(ValueError, match="pools must be"):
        fcb.predicted_ttft_ms(t, {"idle": np.array([0.001])}, idle=idle)


def test_idle_at_arrival_reads_the_simulated_steps():
    cost = TokenCost(prefill_per_token=0.0, decode_base=10_000.0, decode_per_seq=0.0)  # 10 ms a step
    pol = {"max_active": 8, "kv_token_budget": 4096}
    # request 0 wakes the engine; 1 arrives mid-run; 2 arrives long after everything finished
    sim = fcb._simulate(np.array([0.0, 0.005, 5.0]), np.array([4, 4, 4]), np.array([3, 3, 3]), cost, pol)
    assert fcb.idle_at_arrival(sim).tolist() == [True, False, True]


def test_server_policy_matches_the_config():
    assert fcb.server_policy() == {"max_active": 8, "kv_token_budget": 4096, "max_waiting": 256}


def test_saturated_capacity_is_the_full_batch_rate():
    cost = TokenCost(prefill_per_token=0.0, decode_base=1000.0, decode_per_seq=0.0)
    p = [np.zeros(10, np.int32)] * 80
    cap = fcb.saturated_capacity(cost, {"max_active": 8, "kv_token_budget": 4096}, p, np.full(80, 10))
    assert cap == pytest.approx(8 / (10 * 1e-3))  # 8 requests every 10 steps of 1 ms


def test_cli_rejects_bad_level(capsys):
    assert main(["fidelity-cb", "--level-s", "0"]) == 2
    assert "--level-s must be > 0" in capsys.readouterr().err


@pytest.mark.server
def test_fidelity_cb_small_against_the_session_server(triton, monkeypatch):
    import json

    monkeypatch.setenv("TRITON_URL", triton.http_url)
    monkeypatch.setenv("BATCHLAB_TRITON_KEY", triton.key or "")
    monkeypatch.setenv("TRITON_GRPC_URL", triton.grpc_url)
    monkeypatch.setenv("TRITON_METRICS_URL", triton.metrics_url)
    out = json.loads(json.dumps(fcb.run(level_s=2.0, loads=(("medium", 0.5),), calib_open_s=1.0, rounds=2,
                                        at_rate_s=2.0), allow_nan=False))
    lv = out["levels"]["medium"]
    assert lv["errors"] == 0 and lv["requests"] > 0
    assert set(lv["error"]) == set(lv["within_goal"]) == {"tokens_per_s", "ttft_p50", "ttft_p99"}
    assert lv["measured"]["ttft_p50"] <= lv["measured"]["ttft_p99"]
    cal = out["calibration"]["per_load"]["medium"]
    assert cal["fit"]["steps_timed"] >= 8 and cal["capacity_rps"] > 0
    assert all(r["errors"] == 0 for r in cal["runs"].values())
    at = cal["at_rate_runs"]  # the interleaved runs at the load's rate: their steps join the fit
    assert at["segments"] == 2 and len(at["runs"]) == 2 and all(r["errors"] == 0 for r in at["runs"])
    a_timed = sum(r["timed_steps"] for r in at["runs"])
    if a_timed >= fcb.AT_RATE_MIN_STEPS:
        assert at["fit_from"] == "these runs" and at["fit"]["steps_timed"] == a_timed
    else:  # too few of their own: the calibration runs' steps join them
        assert at["fit"]["steps_timed"] == cal["fit"]["steps_timed"] + a_timed and "calibration" in at["fit_from"]
    drift = lv["step_time_vs_fit"]  # the segments' own steps were rebuilt and compared with the fit
    assert set(drift) == {"what", "segments", "at_rate_runs"} and abs(drift["at_rate_runs"]) < 1
    again = lv["runs_at_its_rate_measured"]  # the runs at the load's rate, measured like the load
    assert set(again["difference"]) == {"ttft_p50", "ttft_p99"} and again["measured"]["ttft_p50"] > 0
    slow = lv["ttft_if_steps_5pct_slower"]
    assert 0 < slow["predicted"]["ttft_p50"] <= slow["predicted"]["ttft_p99"]
    assert set(slow["change_vs_prediction"]) == {"ttft_p50", "ttft_p99"}
    busy = out["machine"]["cpu_cores_used_by_other_processes"] > 0.3
    assert out["machine_busy"] is busy
    assert out["goal_met"] is (out["goal_met_as_measured"] and not busy)


def test_pooled_segments_add_tokens_and_spans():
    cost = TokenCost(prefill_per_token=0.0, decode_base=10_000.0, decode_per_seq=0.0)  # 10 ms a step
    pol = {"max_active": 8, "kv_token_budget": 4096}
    a = fcb._simulate(np.array([0.0]), np.array([4]), np.array([3]), cost, pol)  # 3 steps: 30 ms
    b = fcb._simulate(np.array([0.0, 0.0]), np.array([4, 4]), np.array([5, 5]), cost, pol)  # 5 steps, 2 seqs
    out = fcb.pool_continuous([a, b])
    assert out["tokens_per_s"] == pytest.approx((3 + 10) / (0.030 + 0.050))
    assert out["ttft_s"].tolist() == pytest.approx([0.010, 0.010, 0.010])
    assert out["batch_size_mean"] == pytest.approx((3 * 1 + 5 * 2) / 8)
    assert out["inter_token_s"] == pytest.approx(0.010)
    assert np.isnan(fcb.pool_continuous([])["tokens_per_s"])


def test_step_time_vs_fit_reads_a_slower_engine():
    arrivals, prompts, outputs = poisson_workload(3, 200, 40)
    steps = fcb.rebuild_steps(*engine_records(arrivals, prompts, outputs))
    # a step is timed first token to first token; the client's small per-token delivery offsets stay out
    assert fcb.step_time_vs_fit(steps, TRUE) == pytest.approx(0.0, abs=0.01)
    slow = fcb.rebuild_steps(*engine_records(arrivals, prompts, outputs, cost=fcb.scaled_cost(TRUE, 1.1)))
    assert fcb.step_time_vs_fit(slow, TRUE) == pytest.approx(0.10, abs=0.01)
    none = {k: v[:0] for k, v in steps.items() if k != "n_groups"}
    assert np.isnan(fcb.step_time_vs_fit(none, TRUE))


def test_scaled_cost_scales_every_term_and_the_table():
    table = DecodeTableCost(prefill_per_token=40.0, decode_base=1500.0, decode_per_seq=300.0,
                            context_per_token=2.0, decode_us=(1800.0, 2100.0))
    for cost in (TRUE, table):
        s = fcb.scaled_cost(cost, 1.05)
        assert type(s) is type(cost)
        for args in ((0, 1, 30), (0, 2, 60), (64, 0, 0), (16, 5, 200)):
            assert s.iteration_time(*args) == pytest.approx(1.05 * cost.iteration_time(*args))
    with pytest.raises(ValueError, match="factor"):
        fcb.scaled_cost(TRUE, 0.0)


def test_served_by_next_step_marks_who_waited_for_a_slot():
    cost = TokenCost(prefill_per_token=0.0, decode_base=10_000.0, decode_per_seq=0.0)  # 10 ms a step
    pol = {"max_active": 1, "kv_token_budget": 4096}
    # one slot: the first request is served at once, the second waits for it, the third finds it free
    sim = fcb._simulate(np.array([0.0, 0.001, 0.5]), np.array([4, 4, 4]), np.array([3, 3, 3]), cost, pol)
    assert fcb.served_by_next_step(sim).tolist() == [True, False, True]


def _steps(durations_us, decode=4, context=100):
    n = len(durations_us)
    return {"timed": np.ones(n, bool), "duration": np.asarray(durations_us, float) * 1e-6,
            "decode_seqs": np.full(n, float(decode)), "prefill_tokens": np.zeros(n),
            "context_tokens": np.full(n, float(context)), "prefill_seqs": np.zeros(n)}


def test_step_variability_draws_measured_steps_in_blocks():
    unit = TRUE.iteration_time(0, 4, 100) * 1e6
    runs = fcb.step_variability([_steps([unit * (2.0 if (k // 100) % 2 else 1.0) for k in range(600)])], TRUE)
    assert runs["model"].block == fcb.STEP_BLOCK and runs["json"]["model"] == "block_resampled"
    assert runs["json"]["autocorrelation_of_log_time_over_fit"]["lag1"] > 0.9
    assert runs["model"].ratios[0] < runs["model"].ratios[150]  # measured order kept, rescaled to mean 1
    # receive jitter: a late token lengthens one gap and shortens the next; blocks keep the pairs
    late = np.tile([1.3, 0.7], 300) * unit
    jit = fcb.step_variability([_steps(late)], TRUE)
    assert jit["json"]["autocorrelation_of_log_time_over_fit"]["lag1"] < -0.9
    assert jit["json"]["cv"] == pytest.approx(0.3, rel=0.01) and jit["model"].block == fcb.STEP_BLOCK
    draw = jit["model"].sampler()
    sums = [sum(draw() for _ in range(fcb.STEP_BLOCK)) for _ in range(40)]  # one block each
    assert np.std(sums) < 0.5  # ~0 (an odd start shifts the pairs by one); drawn one at a time: ~2.1
    # untimed, unfinished and zero-length gaps are left out
    st = _steps([unit, unit, 0.0, float("nan"), unit * 3])
    st["timed"][1] = False
    assert fcb.step_variability([st], TRUE)["json"]["steps"] == 2


def test_predict_segments_fixed_and_variable():
    rng = np.random.default_rng(3)
    segs = []
    for j in range(2):
        arr = np.cumsum(rng.exponential(1 / 40.0, 300))
        segs.append((arr, [np.zeros(int(x)) for x in rng.integers(9, 26, 300)], rng.integers(1, 60, 300)))
    over = {"idle": np.array([0.004]), "busy": np.array([0.001])}
    policy = {"max_active": 8, "kv_token_budget": 4096}
    fixed = fcb.predict_segments(segs, TRUE, policy, over, seed=1)
    sims = [fcb._simulate(a, np.array([len(x) for x in p]), o, TRUE, policy) for a, p, o in segs]
    pooled = fcb.pool_continuous(sims)
    assert fixed["tokens_per_s"] == pytest.approx(pooled["tokens_per_s"])
    assert fixed["sim_ttft_p99_ms"] == pytest.approx(np.percentile(pooled["ttft_s"], 99) * 1e3)
    assert fixed["ttft_p50"] >= fixed["sim_ttft_p50_ms"] + 1.0 - 1e-9  # every request pays >= 1 ms overhead
    unit = TRUE.iteration_time(0, 4, 100) * 1e6
    slow_runs = fcb.step_variability([_steps([unit * (2.5 if (k // 100) % 3 == 2 else 1.0) for k in range(900)])],
                                     TRUE)["model"]
    var = fcb.predict_segments(segs, slow_runs, policy, over, seed=1)
    assert var == fcb.predict_segments(segs, slow_runs, policy, over, seed=1)  # seeded
    assert var["ttft_p99"] > 1.2 * fixed["ttft_p99"]  # runs of slow steps queue the requests behind them
    assert var["tokens_per_s"] == pytest.approx(fixed["tokens_per_s"], rel=0.1)  # the offered load is served
