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
    with TritonServer(tmp_path) as server:
        seen = C.server_kv_admission(server, "lm_stream_kv1k", n_requests=6, prompt_tokens=128, max_tokens=128)
    assert seen["tokens"] == 6 * 128
    assert seen["max_active_seen"] == predicted
    assert seen["max_kv_tokens_seen"] <= 1024


# --- chapter 03: the share of allocated KV holding tokens, and how many sequences a pool holds ---

def test_chat_workload_is_seeded_and_in_range():
    prompts, max_tokens, seeds = C.chat_workload(20, seed=3)
    again = C.chat_workload(20, seed=3)
    assert all(48 <= p.size <= 224 and p[0] == 1 for p in prompts) and max_tokens == [256] * 20
    assert all((a == b).all() for a, b in zip(prompts, again[0])) and seeds == again[2] and len(set(seeds)) == 20
    with pytest.raises(ValueError, match="prompt_tokens"):
        C.chat_workload(3, prompt_tokens=(10, 5))


def _fake_round(figures):
    """What `stream_requests` returns, reduced to the responses' figures."""
    import numpy as np
    from types import SimpleNamespace

    return SimpleNamespace(figures=figures, tokens=np.array([len(f) for f in figures]),
                           sent=np.zeros(len(figures)), last=np.ones(len(figures)))


def test_the_share_comes_from_the_servers_figures_per_step(monkeypatch):
    # two steps, each reported to both requests: pool blocks of 16 (lm_stream) or slots (lm_iterative)
    paged = [[{"T_NS": 1, "KV_BLOCKS": 2, "KV_TOKENS": 30}, {"T_NS": 2, "KV_BLOCKS": 3, "KV_TOKENS": 40}]] * 2
    monkeypatch.setattr(C, "stream_requests", lambda *a, **k: _fake_round(paged))
    assert C.kv_share_round(None, "lm_paged", n=2)["share"] == pytest.approx(70 / 80)
    flat = [[{"T_NS": 5, "KV_SLOTS": 64, "KV_TOKENS": 33}]] * 2
    monkeypatch.setattr(C, "stream_requests", lambda *a, **k: _fake_round(flat))
    assert C.kv_share_round(None, "lm_iterative", n=2)["share"] == pytest.approx(33 / 64)


def test_a_pool_holds_what_it_runs_while_requests_wait(monkeypatch):
    steps = [{"T_NS": t, "ACTIVE": a, "WAITING": w, "KV_BLOCKS": 4, "KV_TOKENS": 50}
             for t, a, w in ((1, 6, 3), (2, 4, 1), (3, 2, 0))]
    final = dict(steps[-1], CACHED_TOKENS=0, PREEMPTIONS=2, RECOMPUTED_TOKENS=30)
    monkeypatch.setattr(C, "stream_requests", lambda *a, **k: _fake_round([steps, steps[:2] + [final]]))
    r = C.pool_round(None, "lm_paged_1k", n=2)
    assert (r["held_while_queued"], r["mean_active"], r["max_active"]) == (5.0, 4.0, 6)
    assert (r["preemptions"], r["recomputed_tokens"]) == (2, 30)


def test_kv_layouts_paged_wastes_under_a_block_contiguous_doubles_reserve_holds_all(lm):
    lay = C.kv_layouts(lm, prompt_tokens=8, max_tokens=72)
    held, slots = lay["held"], lay["slots"]
    assert held[0] == 8 and held[-1] == 8 + 72 - 2 and list(slots) == list(C.KV_LAYOUTS)
    assert ((slots["paged"] - held >= 0) & (slots["paged"] - held < 16)).all()
    assert sorted(set(slots["contiguous"])) == [16, 32, 64, 128]          # the prompt rounded up, then doubling
    assert set(slots["reserve"]) == {80}                                   # prompt + max_tokens in whole blocks
    wide = C.kv_layouts(lm, prompt_tokens=8, max_tokens=72, block_size=32)["slots"]["paged"]
    assert (wide - held).max() == 31 and wide[-1] == 96


def test_kv_layouts_refuses_an_empty_sequence(lm):
    with pytest.raises(ValueError, match="prompt_tokens"):
        C.kv_layouts(lm, prompt_tokens=0)


def test_the_pool_round_reports_the_blocks_at_its_peak(monkeypatch):
    steps = [{"T_NS": t, "ACTIVE": a, "WAITING": 0, "KV_BLOCKS": b, "KV_TOKENS": 50}
             for t, a, b in ((1, 3, 10), (2, 5, 12), (3, 5, 20), (4, 2, 30))]
    final = dict(steps[-1], CACHED_TOKENS=0, PREEMPTIONS=0, RECOMPUTED_TOKENS=0)
    monkeypatch.setattr(C, "stream_requests", lambda *a, **k: _fake_round([steps[:3] + [final]]))
    r = C.pool_round(None, "lm_paged_640", n=1)
    assert (r["max_active"], r["blocks_at_peak"], r["peak_kv_blocks"]) == (5, 12, 30)
    assert r["held_while_queued"] != r["held_while_queued"]                # nobody waited: nan
