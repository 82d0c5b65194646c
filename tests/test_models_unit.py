"""The course models' Python-backend classes, run in-process with `tests/fake_pb.py`.

Fast checks of validation, error isolation inside a batch, state handling and reclamation;
the same behaviour is then checked on the real server in test_models_server.py.
"""

from __future__ import annotations

import importlib
import time

import numpy as np
import pytest

from batchlab.lm import VOCAB_SIZE, ToyLM, encode, generate
from batchlab.paths import MODEL_REPOSITORY

import fake_pb  # tests/fake_pb.py


@pytest.fixture(autouse=True)
def pb_stub():
    with fake_pb.installed():
        yield


def make(model: str, module: str | None = None):
    mod = importlib.import_module(f"batchlab.models.{module or model}")
    instance = mod.TritonPythonModel()
    instance.initialize(fake_pb.init_args(MODEL_REPOSITORY / model))
    return instance


def err(resp) -> str:
    assert resp.has_error(), "expected an error response"
    return resp.error().message()


def padded(text: str, length: int = 16) -> np.ndarray:
    ids = encode(text)
    row = np.zeros((1, length), np.int32)
    row[0, :ids.size] = ids
    return row


def gen_inputs(prompt, max_tokens, batched=True, **opt):
    p = np.asarray(prompt, np.int32)
    inputs = {"PROMPT": p[None] if batched else p,
              "MAX_TOKENS": np.array([[max_tokens]] if batched else [max_tokens], np.int32)}
    if "temperature" in opt:
        inputs["TEMPERATURE"] = np.array([[opt["temperature"]]] if batched
                                         else [opt["temperature"]], np.float32)
    if "seed" in opt:
        inputs["SEED"] = np.array([[opt["seed"]]] if batched else [opt["seed"]], np.int64)
    if "ignore_eos" in opt:
        inputs["IGNORE_EOS"] = np.array([[opt["ignore_eos"]]] if batched
                                        else [opt["ignore_eos"]], bool)
    return inputs


# --------------------------------------------------------------------------- every model loads

MODELS = sorted(p.parent.name for p in MODEL_REPOSITORY.glob("*/config.pbtxt"))


@pytest.mark.parametrize("model", MODELS)
def test_every_model_directory_has_a_loadable_model(model):
    text = (MODEL_REPOSITORY / model / "1" / "model.py").read_text()
    module = text.split("batchlab.models.")[-1].split()[0]
    instance = make(model, module)
    if hasattr(instance, "finalize"):
        instance.finalize()


# --------------------------------------------------------------------------- embed, noop

def test_embed_serves_good_rows_and_rejects_bad_requests_in_the_same_batch():
    model = make("embed")
    good = [padded("动态批处理"), np.concatenate([padded("一口锅"), padded("拼锅")])]
    bad = {
        "exactly 16 token ids": np.zeros((1, 8), np.int32) + 5,
        "vocabulary": np.full((1, 16), VOCAB_SIZE, np.int32),
        "starts with <pad>": np.zeros((1, 16), np.int32),
        "follows <pad>": np.array([[5, 0, 6] + [0] * 13], np.int32),
        "dtype": np.ones((1, 16), np.float32),
    }
    requests = [fake_pb.Request({"TOKENS": good[0]})]
    requests += [fake_pb.Request({"TOKENS": t}) for t in bad.values()]
    requests += [fake_pb.Request({"TOKENS": good[1]}), fake_pb.Request({})]
    out = model.execute(requests)
    assert len(out) == len(requests)
    for resp, match in zip(out[1:1 + len(bad)], bad):
        assert match in err(resp)
    assert "missing" in err(out[-1])
    lm = ToyLM.default()
    assert np.array_equal(out[0].output("EMBEDDING"), lm.embed(good[0]))
    assert np.array_equal(out[-2].output("EMBEDDING"), lm.embed(good[1]))
    assert out[0].output("BATCH_SIZE").ravel().tolist() == [3]  # only the good rows ran


def test_noop_echoes():
    model = make("noop")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (resp,) = model.execute([fake_pb.Request({"INPUT0": x})])
    assert np.array_equal(resp.output("OUTPUT0"), x)


# --------------------------------------------------------------------------- generate

def test_generate_static_batch_matches_solo_and_reports_padding():
    model = make("generate")
    lm = ToyLM.default()
    specs = [("一口锅", 4, {}), ("动态批处理与序列批处理", 9, {"ignore_eos": True}),
             ("拼锅", 6, {"temperature": 0.8, "seed": 3, "ignore_eos": True})]
    requests = [fake_pb.Request(gen_inputs(encode(t), m, **o)) for t, m, o in specs]
    bad = {
        "MAX_TOKENS must lie": gen_inputs(encode("锅"), 0),
        "limit is 256": gen_inputs(np.full(300, 5), 4),
        "outside the vocabulary": gen_inputs([1, VOCAB_SIZE + 3], 4),
        "temperature": gen_inputs(encode("锅"), 4, temperature=-1.0),
        "SEED must be": gen_inputs(encode("锅"), 4, seed=-2),
        "dtype": {"PROMPT": np.array([[1.0, 2.0]], np.float32),
                  "MAX_TOKENS": np.array([[4]], np.int32)},
    }
    requests[1:1] = [fake_pb.Request(v) for v in bad.values()]
    out = model.execute(requests)
    for resp, match in zip(out[1:1 + len(bad)], bad):
        assert match in err(resp)
    good = [out[0]] + out[1 + len(bad):]
    expected = [generate(lm, encode(t), m, o.get("temperature", 0.0), o.get("seed", 0),
                         o.get("ignore_eos", False)) for t, m, o in specs]
    steps = max(len(e) for e in expected)
    for resp, exp in zip(good, expected):
        assert resp.output("TOKENS").ravel().tolist() == exp
        assert resp.output("NUM_TOKENS").item() == len(exp)
        assert resp.output("BATCH_STEPS").item() == steps
        assert resp.output("PADDED_STEPS").item() == steps - len(exp)
        assert resp.output("BATCH_SIZE").item() == 3


# --------------------------------------------------------------------------- lm_step

def step_request(corr, tokens=None, start=False, end=False, **extra):
    inputs = dict(extra)
    if tokens is not None:
        inputs["TOKENS"] = np.asarray([tokens], np.int32)
    return fake_pb.Request(inputs, correlation_id=corr, start=start, end=end)


def test_lm_step_keeps_state_per_sequence_and_frees_it_at_end():
    model = make("lm_step")
    lm = ToyLM.default()
    a, b = encode("一口锅"), encode("动态批处理")
    exp_a = generate(lm, a, 4, ignore_eos=True)
    exp_b = generate(lm, b, 3, ignore_eos=True)
    null = fake_pb.Request({"TOKENS": np.array([[123456]], np.int32)}, correlation_id=0,
                           ready=False, controls=False)
    out = model.execute([null, step_request(1, a, start=True), step_request(2, b, start=True)])
    assert out[0].output("TOKEN").item() == 0 and not out[0].has_error()
    got_a, got_b = [out[1].output("TOKEN").item()], [out[2].output("TOKEN").item()]
    assert out[1].output("BATCH_SIZE").item() == 2 and out[1].output("LIVE_SEQUENCES").item() == 2
    # SLOT: each request's position in the execution, the padding slot 0 included (direct: its batch slot)
    assert [r.output("SLOT").item() for r in out] == [0, 1, 2]
    out = model.execute([step_request(2, None), step_request(1, None)])
    got_b.append(out[0].output("TOKEN").item())
    got_a.append(out[1].output("TOKEN").item())
    out = model.execute([step_request(1, None), step_request(2, None, end=True)])
    got_a.append(out[0].output("TOKEN").item())
    got_b.append(out[1].output("TOKEN").item())
    assert out[1].output("LIVE_SEQUENCES").item() == 1
    (resp,) = model.execute([step_request(1, None, end=True)])
    got_a.append(resp.output("TOKEN").item())
    assert resp.output("LIVE_SEQUENCES").item() == 0 and resp.output("KV_TOKENS").item() == 0
    assert got_a == exp_a and got_b == exp_b
    model.finalize()


def test_lm_step_errors_are_clear_and_per_request():
    model = make("lm_step")
    ok_req = step_request(7, encode("拼锅"), start=True)
    out = model.execute([
        step_request(3, None, start=True),                   # START without prompt
        step_request(4, None),                               # never started
        step_request(5, [VOCAB_SIZE], start=True),           # bad id
        ok_req,
    ])
    assert "must carry the prompt" in err(out[0])
    assert "no KV cache" in err(out[1]) and "START" in err(out[1])
    assert "outside the vocabulary" in err(out[2])
    assert not out[3].has_error()
    out = model.execute([step_request(7, [5, 6])])           # two tokens after START
    assert "at most one token" in err(out[0])
    (resp,) = model.execute([step_request(7, [5])])          # the sequence still works
    assert resp.output("LENGTH").item() == 4
    model.finalize()


def test_lm_step_reaps_idle_caches():
    model = make("lm_step")
    model.execute([step_request(11, encode("一口锅"), start=True)])
    assert len(model.states) == 1
    assert model.reap(time.monotonic()) == 0                 # not idle yet
    assert model.reap(time.monotonic() + model.reap_after + 1) == 1
    (resp,) = model.execute([step_request(11, None)])
    assert "no KV cache" in err(resp)
    model.finalize()


# --------------------------------------------------------------------------- lm_iterative

def run_iterative(model, requests, max_rounds=200):
    """Drive the model as Triton's iterative scheduler would: reschedule until released."""
    live = list(requests)
    sizes = []
    for _ in range(max_rounds):
        if not live:
            break
        model.execute(live)
        sizes.append(len(live))
        live = [r.after_reschedule() for r in live
                if r.release_flags == fake_pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE]
    return sizes


def tokens_of(request):
    return [r.output("TOKEN").item() for r in request.sender.responses()]


def test_lm_iterative_streams_each_sequence_like_solo():
    model = make("lm_iterative")
    lm = ToyLM.default()
    specs = [("一口锅", 5), ("动态批处理", 9), ("拼锅", 2)]
    reqs = [fake_pb.Request(gen_inputs(encode(t), m, ignore_eos=True), correlation_id=i + 1,
                            start=True) for i, (t, m) in enumerate(specs)]
    sizes = run_iterative(model, reqs)
    assert sizes[:2] == [3, 3] and sizes[-1] == 1
    for r, (t, m) in zip(reqs, specs):
        assert r.sender.finished
        assert tokens_of(r) == generate(lm, encode(t), m, ignore_eos=True)
        idx = [x.output("INDEX").item() for x in r.sender.responses()]
        assert idx == list(range(m))
    # after the first execution the three contiguous caches hold their prompts, each allocated in
    # multiples of 16 token positions
    first = [r.sender.responses()[0] for r in reqs]
    sizes = [encode(t).size for t, _ in specs]
    assert {x.output("KV_TOKENS").item() for x in first} == {sum(sizes)}
    assert {x.output("KV_SLOTS").item() for x in first} == {sum(-(-n // 16) * 16 for n in sizes)}
    assert model.states == {}
    model.finalize()


def test_lm_iterative_rejects_bad_input_and_handles_cancel_and_fillers():
    model = make("lm_iterative")
    bad = fake_pb.Request(gen_inputs(encode("锅"), 999), correlation_id=5, start=True)
    filler = fake_pb.Request(gen_inputs(encode("锅"), 3), correlation_id=0, ready=False,
                             controls=False)
    good = fake_pb.Request(gen_inputs(encode("一口锅"), 50, ignore_eos=True), correlation_id=6,
                           start=True)
    ends = fake_pb.Request(gen_inputs(encode("锅"), 3), correlation_id=7, start=True, end=True)
    model.execute([bad, filler, good, ends])
    assert bad.sender.finished and "MAX_TOKENS" in err(bad.sender.responses()[0])
    assert ends.sender.finished and "without sequence_end" in err(ends.sender.responses()[0])
    assert filler.sender.finished and filler.sender.responses() == []
    assert good.release_flags == fake_pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
    good.after_reschedule().sender.cancel()
    model.execute([good])
    assert good.sender.finished and 6 not in model.states
    # a sequence whose request vanished (client cancel while queued) is reaped
    lost = fake_pb.Request(gen_inputs(encode("一口锅"), 50), correlation_id=8, start=True)
    model.execute([lost])
    assert 8 in model.states
    assert model.reap(time.monotonic() + model.reap_after + 1) == 1 and model.states == {}
    model.finalize()


# --------------------------------------------------------------------------- lm_stream

def test_lm_stream_batches_inside_the_model_and_matches_solo():
    model = make("lm_stream")
    lm = ToyLM.default()
    specs = [("一口锅", 6), ("动态批处理", 12), ("拼锅", 3), ("序列批处理让", 9)]
    reqs = [fake_pb.Request(gen_inputs(encode(t), m, batched=False, ignore_eos=True))
            for t, m in specs]
    model.execute(reqs)
    for r, (t, m) in zip(reqs, specs):
        assert r.sender.wait_final(20)
        assert tokens_of(r) == generate(lm, encode(t), m, ignore_eos=True)
    active = [x.output("ACTIVE").item() for r in reqs for x in r.sender.responses()]
    assert max(active) > 1
    model.finalize()


def test_lm_stream_cancel_check_asks_the_running_and_a_few_waiting_in_turn():
    from batchlab.models.lm_stream import CANCEL_CHECK_WAITING as K

    model = make("lm_stream")
    model.cancel_check_s = float("inf")  # the scheduler thread never checks; the test does
    model.batcher.scheduler.max_active = 1
    reqs = [fake_pb.Request(gen_inputs(encode("一口锅"), 250, batched=False, ignore_eos=True)) for _ in range(30)]
    asked: list[int] = []
    for k, r in enumerate(reqs):
        r.sender.is_cancelled = (lambda k=k, real=r.sender.is_cancelled: asked.append(k) or real())
    model.execute(reqs)
    deadline = time.monotonic() + 10
    while not reqs[0].sender.sent and time.monotonic() < deadline:
        time.sleep(0.01)
    model._check_cancelled()  # one check: the running request and K of the 29 waiting, not all 30
    assert asked[0] == 0 and len(asked) == 1 + K and len(set(asked)) == 1 + K
    reqs[-1].sender.cancel()  # the last in the queue: reached within ceil(29 / K) checks
    asked.clear()
    for _ in range(-(-29 // K)):
        model._check_cancelled()
    assert set(asked) == set(range(30)) and len(asked) <= -(-29 // K) * (1 + K)
    assert all(sender is not reqs[-1].sender for _, sender in model.senders.values())
    assert model.batcher.n_waiting == 28
    model.finalize()


def test_lm_stream_errors_cancel_and_budget():
    from batchlab.lm import ContinuousBatcher

    model = make("lm_stream")
    model.batcher = ContinuousBatcher(model.lm, max_active=8, kv_token_budget=300)  # a pool of 18 blocks
    too_long = fake_pb.Request(gen_inputs(np.full(257, 5), 5, batched=False))
    over_budget = fake_pb.Request(gen_inputs(np.full(100, 5), 250, batched=False))
    bad = fake_pb.Request(gen_inputs([1, VOCAB_SIZE], 4, batched=False))
    long = fake_pb.Request(gen_inputs(encode("一口锅"), 250, batched=False, ignore_eos=True))
    model.execute([too_long, over_budget, bad, long])
    assert "limit is 256" in err(too_long.sender.responses()[0])
    assert "the pool holds 18 blocks" in err(over_budget.sender.responses()[0])
    assert "outside the vocabulary" in err(bad.sender.responses()[0])
    deadline = time.monotonic() + 10
    while len(long.sender.sent) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    long.sender.cancel()
    deadline = time.monotonic() + 10
    while model.batcher.has_work and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not model.batcher.has_work and model.senders == {}
    assert len(long.sender.sent) < 250
    after = fake_pb.Request(gen_inputs(encode("拼锅"), 3, batched=False))
    model.execute([after])
    assert after.sender.wait_final(10) and len(tokens_of(after)) >= 1
    model.finalize()
