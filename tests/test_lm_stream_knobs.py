"""lm_stream's serving knobs (`step_policy`, `max_num_tokens`, `kv_policy`, `prefix_caching`, `block_size`,
`kv_token_budget`): read from config.pbtxt, validated at load, and streaming the tokens of the defaults;
its server-side figures (KV blocks and tokens per step, prefix hits and preemptions per request)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from batchlab import config_pbtxt as cfg
from batchlab.lm import ToyLM, encode, generate
from batchlab.lm.vocab import ARTICLE
from batchlab.models.lm_stream import TritonPythonModel

import fake_pb  # tests/fake_pb.py

KNOBS = {"max_num_tokens": "32", "step_policy": "chunked", "kv_policy": "on_demand",
         "kv_token_budget": "400", "prefix_caching": "true", "block_size": "16"}


def staged(tmp_path: Path, name: str, params: dict[str, str]) -> Path:
    c = cfg.edit_config(cfg.load_config_text("lm_stream"), {
        "name": name, "parameters": {k: f'string_value: "{v}"' for k, v in params.items()}})
    cfg.stage_model(tmp_path, name, cfg.to_text(c), "lm_stream")
    return tmp_path / name


def load(tmp_path: Path, params: dict[str, str]) -> TritonPythonModel:
    model = TritonPythonModel()
    model.initialize(fake_pb.init_args(staged(tmp_path, "lm_stream_knobs", params)))
    return model


def jobs() -> list[tuple[np.ndarray, int]]:
    """Prompts sharing a 60-token prefix (3 full blocks of 16), then each its own text."""
    shared = encode(ARTICLE[:80])[:60]
    return [(np.concatenate([shared, encode(ARTICLE[200 + 37 * i:230 + 37 * i])[1:]]), 4 + 3 * i)
            for i in range(5)]


def test_defaults_keep_todays_batcher():
    model = TritonPythonModel()
    model.initialize(fake_pb.init_args(cfg.MODEL_REPOSITORY / "lm_stream"))
    s = model.batcher.scheduler
    assert (s.max_num_tokens, s.step_policy, type(s.admission).__name__, s.max_active) == (
        np.inf, "mixed", "ReserveAdmission", 8)
    blocks = model.batcher.blocks
    assert (blocks.num_blocks, blocks.block_size, blocks.prefix_caching) == (4096 // 16, 16, False)
    assert model.batcher.pool.k.shape[2:4] == (256, 16)       # the pool is the KV storage
    model.finalize()


@pytest.mark.parametrize("params, message", [
    ({"step_policy": "whole"}, "step_policy='whole' is not one of prefill_first, mixed, chunked"),
    ({"step_policy": "chunked"}, "step_policy=chunked needs max_num_tokens > 0"),
    ({"kv_policy": "evict"}, "kv_policy='evict' is not one of reserve, on_demand"),
    ({"prefix_caching": "yes"}, "prefix_caching='yes' is not one of false, true"),
    ({"block_size": "0"}, r"block_size=0 is outside \[1, 512\]"),
    ({"kv_token_budget": "8"}, r"kv_token_budget=8 is outside \[16, None\]"),
    ({"max_num_tokens": "many"}, "max_num_tokens='many' is not an integer"),
    ({"chunked_prefill": "true"}, "chunked_prefill is no longer read: use step_policy"),
    ({"prefix_cache_blocks": "64"}, "prefix_cache_blocks is no longer read: use prefix_caching"),
])
def test_a_bad_knob_fails_the_load_with_one_line(tmp_path, params, message):
    with pytest.raises(ValueError, match=message):
        load(tmp_path, params)


def test_knobs_stream_the_tokens_of_solo_generation(tmp_path):
    with fake_pb.installed():
        _stream_with_knobs(tmp_path)


def _stream_with_knobs(tmp_path):
    model = load(tmp_path, KNOBS)
    lm = ToyLM.default()
    first = [fake_pb.Request(_inputs(*jobs()[0]))]
    model.execute(first)   # the shared prefix is cached once its prompt is done
    assert first[0].sender.wait_final(30)
    rest = [fake_pb.Request(_inputs(p, m)) for p, m in jobs()[1:]]
    model.execute(rest)
    for r, (p, m) in zip(first + rest, jobs()):
        assert r.sender.wait_final(30)
        got = [x.output("TOKEN").item() for x in r.sender.responses()]
        assert got == generate(lm, p, m, ignore_eos=True)
        assert [x.output("INDEX").item() for x in r.sender.responses()] == list(range(m))
    last = [r.sender.responses()[-1] for r in first + rest]
    cached = [x.output("CACHED_TOKENS").item() for x in last]
    assert cached[0] == 0 and all(c >= 48 for c in cached[1:])   # the 60-token prefix: 3 full blocks
    assert all(x.output("PREEMPTIONS").item() >= 0 and x.output("RECOMPUTED_TOKENS").item() >= 0 for x in last)
    steps = [(x.output("KV_BLOCKS").item(), x.output("KV_TOKENS").item()) for r in first + rest
             for x in r.sender.responses()]
    assert all(t <= 16 * b and (t == 0) == (b == 0) for b, t in steps) and max(b for b, _ in steps) <= 400 // 16
    assert all("CACHED_TOKENS" not in x._outputs for r in first + rest for x in r.sender.responses()[:-1])
    model.finalize()


def _inputs(p, m):
    return {"PROMPT": np.asarray(p, np.int32), "MAX_TOKENS": np.array([m], np.int32),
            "IGNORE_EOS": np.array([True])}


@pytest.mark.server
def test_server_streams_the_same_tokens_with_chunked_prefill_and_prefix_cache(tmp_path, start_triton):
    from test_models_server import stream_generate

    staged(tmp_path, "lm_stream_knobs", KNOBS)
    cfg.stage_model(tmp_path, "lm_stream", None, "lm_stream")
    server = start_triton(repo=tmp_path)
    plain = stream_generate(server, "lm_stream", jobs(), first_id=0)
    knobs = stream_generate(server, "lm_stream_knobs", jobs(), first_id=0)
    knobs_again = stream_generate(server, "lm_stream_knobs", jobs(), first_id=0)  # the prefix is cached now
    lm = ToyLM.default()
    for k, (p, m) in enumerate(jobs()):
        expected = generate(lm, p, m, ignore_eos=True)
        for got in (plain, knobs, knobs_again):
            data = [i for i in got[str(k)] if "TOKEN" in i]
            assert [i["TOKEN"] for i in data] == expected and [i["INDEX"] for i in data] == list(range(m))
