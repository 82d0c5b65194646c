"""batchlab.course.capacity: KV capacity checked on the toy LM and the server, and cost."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchlab.course import capacity as C
from batchlab.theory import formulas as F
from batchlab.theory import kv


@pytest.fixture(scope="module")
def lm():
    from batchlab.lm import ToyLM

    return ToyLM.default()


def test_toy_kv_accounting_matches_formula(lm):
    rows = C.toy_kv_accounting(lm, [1, 3, 5], prompt_tokens=10, steps=6)
    cfg = lm.config
    bpt = kv.kv_bytes_per_token(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, 4)
    for r in rows:
        assert r["bytes_per_token"] == bpt
        assert r["tokens_per_seq"] == 10 + 6 - 1
        assert r["used_bytes"] == r["formula_bytes"] == r["n"] * 15 * bpt
        assert r["allocated_bytes"] >= r["used_bytes"]


@pytest.mark.parametrize("budget, prompt, max_tokens", [(1 << 20, 24, 40), (3 << 20, 30, 98), (1 << 19, 8, 8)])
def test_toy_admission_matches_max_concurrent_sequences(lm, budget, prompt, max_tokens):
    r = C.toy_admission_check(lm, budget, prompt, max_tokens, waiting=64)
    assert r["predicted"] == kv.max_concurrent_sequences(budget, r["bytes_per_token"], prompt + max_tokens)
    assert r["admitted"] == min(r["predicted"], 64)


def test_cost_from_run_both_views():
    c = C.cost_from_run("x", 3.6, n_requests=1000, t_busy_s=500.0, t_wall_s=1000.0, tokens=2_000_000)
    assert c.per_request_busy == pytest.approx(F.cost_per_request(3.6, 500.0, 1000))
    assert c.per_request_busy == pytest.approx(0.0005)
    assert c.per_request_wall == pytest.approx(c.per_request_busy / c.utilization)
    assert c.per_million_tokens_wall == pytest.approx(0.5)  # $0.001/s at 2000 tokens/s
    assert c.per_million_tokens_busy == pytest.approx(0.25)
    assert C.cost_from_run("y", 1.0, 10, 1.0, 2.0).per_million_tokens_busy is None
    with pytest.raises(ValueError, match="busy time"):
        C.cost_from_run("z", 1.0, 10, 30.0, 10.0)
    with pytest.raises(ValueError):
        C.cost_from_run("z", 1.0, 0, 1.0, 2.0)
    with pytest.raises(ValueError, match="missing"):
        C.cost_table(1.0, [{"label": "a"}])


def test_stream_model_limits_reads_lm_stream():
    from batchlab.config_pbtxt import load_config_text

    limits = C.stream_model_limits(load_config_text("lm_stream"))
    assert limits["max_active"] == 8 and limits["kv_token_budget"] == 4096
    with pytest.raises(ValueError, match="max_active"):
        C.stream_model_limits(load_config_text("embed"))


@pytest.mark.server
def test_server_admission_follows_the_kv_budget(tmp_path: Path):
    """The continuous-batching model with a 1024-token KV budget runs at most
    1024 // (128 + 128) = 4 sequences at once, as the formula says."""
    from batchlab import config_pbtxt as cfg
    from batchlab.server import TritonServer

    c = cfg.edit_config(cfg.load_config_text("lm_stream"),
                        {"name": "lm_stream_kv1k", "parameters": {"kv_token_budget": 'string_value: "1024"'}})
    cfg.stage_model(tmp_path, "lm_stream_kv1k", cfg.to_text(c), "lm_stream")
    limits = C.stream_model_limits(c)
    predicted = min(limits["max_active"], kv.max_concurrent_sequences(1024 * 8192, 8192, 256))
    assert predicted == 4
    with TritonServer(tmp_path, stop_grace=10) as server:
        seen = C.server_kv_admission(server, "lm_stream_kv1k", n_requests=6, prompt_tokens=128, max_tokens=128)
    assert seen["errors"] == []
    assert seen["tokens"] == 6 * 128
    assert seen["max_active_seen"] == predicted
    assert seen["max_kv_tokens_seen"] <= 1024
