"""lm_stream's serving knobs (`max_num_tokens`, `chunked_prefill`, `kv_policy`, `prefix_cache_blocks`,
`block_size`): read from config.pbtxt, validated at load, and streaming the tokens of the defaults."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from batchlab import config_pbtxt as cfg
from batchlab.lm import ToyLM, encode, generate
from batchlab.lm.vocab import ARTICLE
from batchlab.models.lm_stream import TritonPythonModel

import fake_pb  # tests/fake_pb.py

KNOBS = {"max_num_tokens": "32", "chunked_prefill": "true", "kv_policy": "on_demand",
         "kv_token_budget": "400", "prefix_cache_blocks": "64", "block_size": "16"}


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
    assert (s.max_num_tokens, s.chunked_prefill, s.reserve, s.prefix_cache) == (np.inf, False, True, None)
    assert s.kv_token_budget == np.inf and model.batcher.policy.kv_token_budget == 4096
    model.finalize()


@pytest.mark.parametrize("params, message", [
    ({"chunked_prefill": "yes"}, "chunked_prefill='yes' is not one of false, true"),
    ({"chunked_prefill": "true"}, "chunked_prefill=true needs max_num_tokens > 0"),
    ({"kv_policy": "evict"}, "kv_policy='evict' is not one of reserve, on_demand"),
    ({"prefix_cache_blocks": "-1"}, r"prefix_cache_blocks=-1 is outside \[0, None\]"),
    ({"block_size": "0"}, r"block_size=0 is outside \[1, 512\]"),
    ({"max_num_tokens": "many"}, "max_num_tokens='many' is not an integer"),
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
    assert len(model.batcher.scheduler.prefix_cache) >= 3
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
