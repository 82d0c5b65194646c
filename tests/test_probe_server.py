"""batchlab.probe on the real server: single-execution timing, crafted patterns, generate calibration."""

from __future__ import annotations

import math

import numpy as np
import pytest

from batchlab.lm import encode
from batchlab.probe import (Pattern, ProbeError, batcher_config, burst, calibrate_generate, calibrate_service,
                            measure_batch_times, reloadable, run_patterns)
from batchlab.sim import Affine, BatchRule

pytestmark = pytest.mark.server


def _row() -> np.ndarray:
    tok = np.asarray(encode("拼锅"), np.int32)
    row = np.zeros((1, 16), np.int32)
    row[0, :tok.size] = tok
    return row


def test_batch_times_are_single_executions_of_each_size(triton) -> None:
    row = _row()
    bt = measure_batch_times(triton, "embed_nobatch", lambda b: {"TOKENS": np.tile(row, (b, 1))},
                             sizes=(1, 4), rounds=2)
    assert bt.sizes == [1, 4]
    for b in bt.sizes:
        assert bt.compute_ms[b].size == 2 and np.all(bt.compute_ms[b] > 0)
        assert np.all(bt.infer_ms[b] <= bt.compute_ms[b])
        # the client waits for the model's execute, and more (not for all of compute_output: the
        # server may time that end after the response is on its way; measured 0.08 ms past it once)
        assert np.median(bt.latency_ms[b]) >= np.median(bt.infer_ms[b])
    with pytest.raises(ValueError, match="rows"):
        measure_batch_times(triton, "embed_nobatch", lambda b: {"TOKENS": row}, sizes=(2,), rounds=1)


def test_calibration_on_the_real_server(triton) -> None:
    cal = calibrate_service(triton, "embed", (1, 4), rows_per_size=8, min_requests=3, warmup_requests=1)
    assert set(cal.compute_ms) == {1, 4}
    assert all(v > 0 and math.isfinite(v) for v in cal.compute_ms.values())
    assert cal.service_ms[4] >= cal.compute_ms[4]
    svc = cal.service()
    assert svc.time(4) == pytest.approx(cal.service_ms[4] / 1e3)
    assert cal.service(scale=2.0).time(4) == pytest.approx(2 * svc.time(4))


def test_shared_server_refuses_reloads_and_reloadable_gives_a_private_one(triton) -> None:
    if getattr(triton, "model_control", None) == "explicit":
        pytest.skip("the session server allows reloads")
    with pytest.raises(ProbeError, match="refused"):
        with batcher_config(triton, "embed", BatchRule(8)):
            pass
    patterns = [
        Pattern("A", burst(5), BatchRule(8, max_queue_delay_us=150_000)),
        Pattern("D", burst(7), BatchRule(8, (4, 8), 150_000)),
    ]
    with reloadable(triton, ["embed"]) as server:
        assert server is not triton
        out = run_patterns(server, "embed", patterns, {"TOKENS": _row()}, Affine(3_000, 1_000))
        client = server.grpc_client()
        restored = client.get_model_config("embed", as_json=True)["config"]
    assert out[0]["config"]["max_batch_size"] == 8
    # no preferred size configured: the server reports [max_batch_size]
    assert [int(x) for x in out[0]["config"]["dynamic_batching"]["preferred_batch_size"]] == [8]
    assert out[0]["real"].batches == out[0]["sim"].batches == [5]
    assert out[1]["real"].histogram == out[1]["sim"].histogram == {3: 1, 4: 1}
    assert out[1]["real"].batches == [4, 3]
    # after the probe the model is back to its previous configuration
    assert int(restored["max_batch_size"]) == 32
    assert "max_queue_delay_microseconds" not in restored.get("dynamic_batching", {})


def test_generate_calibration(triton) -> None:
    # the fastest of 3 rounds each: one round can meet a busy moment (CI #36: prefill 33 ms > full 32.9 ms)
    cal = calibrate_generate(triton, encode("一口锅")[:6], sizes=(1, 2), n_tokens=8, rounds=3)
    assert cal.sizes == [1, 2] and np.all(cal.prefill_ms > 0)
    assert np.all(cal.full_ms > cal.prefill_ms)  # seven decode steps cost time
    assert np.all(cal.step_ms > 0)
    cost = cal.token_cost()
    assert cost.decode_base > 0
