"""Each benchmark, shrunk to a few seconds, against the session's server (through TRITON_URL).

The full-size runs are `make bench`; here the figures are too short to mean much, so the tests
check what must hold at any size: the JSON shape, every request answered, the four ways of
generating returning the same tokens, the server's counters agreeing with the client's.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from batchlab.load.stats import ModelStats
from batchlab.probe.batch_time import batch_table, isotonic, service_model, speedup_ceiling

pytestmark = pytest.mark.server


@pytest.fixture()
def via_env(triton, monkeypatch):
    monkeypatch.setenv("TRITON_URL", triton.http_url)
    monkeypatch.setenv("BATCHLAB_TRITON_KEY", triton.key or "")
    monkeypatch.setenv("TRITON_GRPC_URL", triton.grpc_url)
    monkeypatch.setenv("TRITON_METRICS_URL", triton.metrics_url)
    return triton


def _json(obj: dict) -> dict:
    return json.loads(json.dumps(obj, allow_nan=False))


def test_dynamic_small(via_env) -> None:
    from batchlab.bench.dynamic import run

    out = _json(run(rounds=1, round_s=2.0, warmup_s=0.3, extra=False))  # 1 s under load: too few executions per size to fit t(B)
    assert set(out["models"]) == {"decode", "embed"} and out["headline_model"] == "decode"
    assert set(out["models"]["embed"]["results"]) == {"none", "dynamic", "delay_preferred"}
    assert set(out["models"]["decode"]["results"]) == {"none", "dynamic"}
    for fam in out["models"].values():
        for _name, r in fam["results"].items():
            assert r["errors"] == 0 and r["requests"] > 0 and r["throughput_rps"] > 0
            assert r["latency_ms"]["p50"] <= r["latency_ms"]["p95"] <= r["latency_ms"]["p99"]
            assert r["overhead_cpu_ms_per_request"] is not None and r["overhead_cpu_ms_per_request"] >= 0
        assert fam["results"]["none"]["mean_batch_size"] == 1.0
        assert fam["results"]["dynamic"]["mean_batch_size"] > 1.0
        assert fam["speedup"] == pytest.approx(fam["results"][fam["best_dynamic"]]["throughput_rps"]
                                               / fam["results"]["none"]["throughput_rps"], rel=1e-2)
        assert fam["speedup_ceiling_from_batch_times"]["speedup"] > 1
        assert fam["speedup_ceiling_from_overhead"]["speedup"] > 0
    assert out["speedup"] == out["models"]["decode"]["speedup"]
    busy = out["machine"]["cpu_cores_used_by_other_processes"] > 0.3
    assert out["machine_busy"] is busy and ("machine busy" in out["goal_verdict"]) is busy
    assert out["goal_met"] is (out["goal_met_as_measured"] and not busy)


def test_continuous_small_same_tokens_everywhere(via_env) -> None:
    from batchlab.bench.continuous import run

    out = _json(run(rounds=2, n_requests=8, concurrency=4, scale=16, warmup_requests=2, with_lm_step=True))
    assert out["workload"]["models"] == ["generate", "lm_step", "lm_iterative", "lm_stream"]
    assert len(out["rounds"]) == 2 and out["rounds"][1]["order"][0] == "lm_step"  # order rotates
    for rd in out["rounds"]:
        tokens = rd["output_tokens"]
        for name, r in rd["results"].items():
            assert r["errors"] == 0, (name, r["error_kinds"])
            assert r["tokens"] == tokens, name
            assert 0 < r["eta"] <= 1
        assert rd["results"]["lm_stream"]["eta"] == 1.0
        assert rd["speedup_vs_static"] == pytest.approx(
            rd["results"][rd["best_continuous"]]["tokens_per_s"] / rd["results"]["generate"]["tokens_per_s"], rel=1e-2)
    assert all(out["same_tokens_as_generate"].values()), out["same_tokens_as_generate"]
    ratios = out["speedup_vs_static_spread"]["all"]
    assert out["speedup_vs_static"] == pytest.approx(sorted(ratios)[0] + (sorted(ratios)[1] - sorted(ratios)[0]) / 2, abs=2e-3)
    assert out["workload"]["lm"]["width"] == "as served at TRITON_URL"
    lengths = out["workload"]["output_length"]
    assert lengths["parameters"]["cap"] == 63 and lengths["source"]["median"] == 129
    assert set(lengths["sample"]) == {"n", "mean", "median", "p90", "max"} and lengths["sample"]["n"] == 16
    busy = out["machine"]["cpu_cores_used_by_other_processes"] > 0.3
    assert out["goal_met"] is (out["goal_met_as_measured"] and not busy)


def test_continuous_on_the_wide_lm_stages_private_copies(monkeypatch) -> None:
    """Its own embedded server, on copies of the ways with the decode model's width, in a 0700 folder removed after."""
    import stat

    from batchlab.bench import continuous

    for var in ("TRITON_URL", "TRITON_GRPC_URL", "TRITON_METRICS_URL", "BATCHLAB_TRITON_KEY"):
        monkeypatch.delenv(var, raising=False)
    seen: list[tuple] = []
    stage = continuous.stage_width

    def stage_and_look(dest, models, width):
        seen.append((Path(dest), stat.S_IMODE(Path(dest).stat().st_mode), models))
        return stage(dest, models, width)
    monkeypatch.setattr(continuous, "stage_width", stage_and_look)
    out = _json(continuous.run(rounds=1, n_requests=4, concurrency=2, scale=32, warmup_requests=1))
    (folder, mode, models), = seen
    assert mode == 0o700 and not folder.exists() and models == ("generate", "lm_iterative", "lm_stream")
    lm = out["workload"]["lm"]
    assert (lm["width"], lm["d_model"], lm["d_ff"]) == ("decode", 512, 2048)
    assert all(r["errors"] == 0 for rd in out["rounds"] for r in rd["results"].values())
    assert all(out["same_tokens_as_generate"].values())


def test_client_small(via_env) -> None:
    from batchlab.bench.client import run

    chk_rate = 100.0
    out = _json(run(duration_s=1.0, check_s=1.0, lab_max_rate=chk_rate))
    for proto in ("grpc", "http"):
        c = out["capacity"][proto]
        assert c["errors"] == 0 and c["capacity_rps_one_core"] > chk_rate
    chk = out["open_loop_check"]
    assert chk["offered_rps"] == 100.0 and chk["errors"] == 0


def test_calibration_helpers() -> None:
    y = np.array([5.0, 4.0, 6.0, 9.0, 8.0])
    w = np.array([1.0, 3.0, 1.0, 1.0, 1.0])
    iso = isotonic(y, w)
    assert np.all(np.diff(iso) >= 0)
    assert iso[0] == iso[1] == pytest.approx((5 + 12) / 4) and iso[3] == iso[4] == 8.5
    st = ModelStats("m", batches={b: {"compute_infer": (10, int(10 * (3 + 1.5 * b) * 1e6))} for b in (1, 2, 4, 8)})
    model = service_model(st)
    assert model["affine_ms"] == (pytest.approx(3.0), pytest.approx(1.5))
    c = speedup_ceiling(model, t1_ms=4.5)
    assert c["at_batch"] == 8 and c["speedup"] == pytest.approx(8 * 4.5 / 15.0)
    with pytest.raises(ValueError, match="nothing to calibrate"):
        batch_table(ModelStats("m"))
