"""SimResult records and summary: columns, warm-up, JSON-readiness, helpers for the plotting module."""

import json

import numpy as np
import pytest

from batchlab.sim import (
    BATCH_DTYPE, RECORD_DTYPE, Affine, TokenCost, simulate_continuous, simulate_dynamic,
    simulate_sequence, simulate_static_generation,
)
from batchlab.sim import workload as wl


@pytest.fixture(scope="module")
def results():
    a = wl.poisson(2000.0, 5000, seed=1)
    n = 300
    la = wl.poisson(5.0, n, seed=2)
    p, o = wl.uniform(16, 256).sample(n, 3), wl.uniform(1, 128).sample(n, 4)
    cost = TokenCost(10, 5000, 80)
    return {
        "dynamic": simulate_dynamic(a, Affine(200, 50), 8, 200),
        "static_generation": simulate_static_generation(la, p, o, cost, 8),
        "continuous": simulate_continuous(la, p, o, cost, 16),
        "sequence_direct": simulate_sequence(wl.poisson(20.0, 200, seed=5), wl.uniform(2, 6).sample(200, 6),
                                             Affine(1000, 100), 4, think_time_s=0.05),
    }


def test_summary_is_json_ready_with_all_fields(results):
    for name, res in results.items():
        s = res.summary()
        json.dumps(s, allow_nan=False)
        assert s["scheduler"] == name
        for key in ("throughput_rps", "latency_ms", "queue_ms", "ttft_ms", "batch_size_mean", "batch_size_hist",
                    "utilization", "eta", "kv_high_water", "rejected", "timed_out", "stable", "tokens_per_s"):
            assert key in s, (name, key)
        assert set(s["latency_ms"]) == {"mean", "p50", "p90", "p95", "p99", "max"}  # as a measured LoadReport
        assert s["latency_ms"]["p50"] <= s["latency_ms"]["p95"] <= s["latency_ms"]["p99"] <= s["latency_ms"]["max"]
        assert 0 < s["utilization"] <= 1.0 + 1e-9
        llm = name in ("static_generation", "continuous")
        assert (s["ttft_ms"] is not None) == llm and (s["tokens_per_s"] is not None) == llm
        assert (s["kv_high_water"] is not None) == llm


def test_records_columns_and_arrays(results):
    res = results["continuous"]
    assert res.records.dtype == RECORD_DTYPE and res.batches.dtype == BATCH_DTYPE
    d = res.to_arrays()
    assert set(RECORD_DTYPE.names) | {"latency", "queue", "ttft"} == set(d)
    assert np.allclose(d["latency"], d["finish"] - d["arrival"])
    assert np.all(d["ttft"] <= d["latency"])
    b = res.batches
    assert np.all(b["end"] > b["start"])
    assert res.records["output_tokens"].sum() == pytest.approx(res.summary(warmup=0)["tokens_per_s"] * (
        np.nanmax(res.records["finish"]) - res.records["arrival"][0]), rel=1e-12)


def test_warmup_is_left_out(results):
    res = results["dynamic"]
    assert res.summary()["requests"] == 4500
    assert res.summary(warmup=0)["requests"] == 5000
    assert res.summary(warmup=0.5)["requests"] == 2500
    # the first requests find an empty server: leaving them out changes the mean
    assert res.summary(warmup=0.0)["latency_ms"]["mean"] != res.summary(warmup=0.5)["latency_ms"]["mean"]
    for bad in (-0.1, 1.0, "x"):
        with pytest.raises(ValueError, match="warmup"):
            res.summary(warmup=bad)


def test_queue_length_helpers(results):
    res = results["dynamic"]
    r = res.records
    t = np.linspace(0, r["arrival"][-1], 1000)
    q, n = res.queue_length_at(t), res.in_system_at(t)
    assert np.all(q >= 0) and np.all(n >= q)
    assert res.queue_length_at([r["finish"].max() + 1])[0] == 0


def test_batch_size_histogram_counts_executions(results):
    s = results["dynamic"].summary(warmup=0)
    assert sum(s["batch_size_hist"].values()) == s["executions"]
    assert sum(k * v for k, v in s["batch_size_hist"].items()) == 5000
    assert s["batch_size_mean"] == pytest.approx(5000 / s["executions"])
