"""`decode` (stateless decode step over a fixed KV context) run in-process with fake_pb."""

from __future__ import annotations

import numpy as np
import pytest

from batchlab.lm import VOCAB_SIZE
from batchlab.paths import MODEL_REPOSITORY

import fake_pb  # tests/fake_pb.py


@pytest.fixture(scope="module")
def model():
    with fake_pb.installed():
        from batchlab.models.decode import TritonPythonModel  # reason: needs the fake pb installed first

        m = TritonPythonModel()
        m.initialize(fake_pb.init_args(MODEL_REPOSITORY / "decode"))
        yield m


def _req(ids) -> fake_pb.Request:
    return fake_pb.Request({"TOKEN": np.asarray(ids, np.int32).reshape(-1, 1)})


def _reference(m, token: int) -> int:
    lm = m.lm  # the model's own (wider) LM; decode_step on a private copy of the context
    logits, cache = lm.prefill(m.context)
    return int(np.argmax(lm.decode_step([cache], [token])[0]))


def test_next_token_is_the_lms_after_the_fixed_context(model) -> None:
    with fake_pb.installed():
        out = model.execute([_req([17]), _req([5, 99])])
    assert not out[0].has_error() and not out[1].has_error()
    assert out[0].output("NEXT_TOKEN").tolist() == [[_reference(model, 17)]]
    assert out[1].output("NEXT_TOKEN")[:, 0].tolist() == [_reference(model, 5), _reference(model, 99)]
    assert out[0].output("BATCH_SIZE").tolist() == [[3]] and out[1].output("BATCH_SIZE").tolist() == [[3], [3]]


def test_stateless_same_token_same_answer_in_any_batch(model) -> None:
    with fake_pb.installed():
        alone = model.execute([_req([42])])[0].output("NEXT_TOKEN")
        crowd = model.execute([_req(list(range(4, 50)))])[0].output("NEXT_TOKEN")  # 46 rows > max_batch 32
        again = model.execute([_req([42])])[0].output("NEXT_TOKEN")
    assert alone.tolist() == again.tolist() == [[crowd[42 - 4, 0]]]
    assert model.prefix.length == model.context_len  # the shared context is never changed


def test_bad_request_gets_its_own_error_rest_served(model) -> None:
    with fake_pb.installed():
        out = model.execute([_req([VOCAB_SIZE + 5]), _req([7]), fake_pb.Request({})])
    assert out[0].has_error() and "TOKEN" in out[0].error().message()
    assert not out[1].has_error()
    assert out[2].has_error() and "TOKEN" in out[2].error().message()


def test_decode_is_weight_bound_batch_is_cheap(model) -> None:
    import time  # reason: only this timing check needs it

    def t(b: int) -> float:
        toks = np.arange(4, 4 + b)
        best = float("inf")
        for _ in range(15):
            t0 = time.perf_counter()
            model.step(toks)
            best = min(best, time.perf_counter() - t0)
        return best
    # ceiling (a+b)/b of t(B)=a+bB from B=1 and 32: a decode step is far from linear in B
    t1, t32 = t(1), t(32)
    per_row = (t32 - t1) / 31
    assert (t1 / max(per_row, 1e-9)) > 3.3


@pytest.mark.server
def test_decode_on_the_server_batches_and_answers_like_the_class(triton, model) -> None:
    from concurrent.futures import ThreadPoolExecutor  # reason: only the server test needs threads

    import tritonclient.http as httpclient  # reason: only the server test builds inputs

    def infer(tok: int) -> tuple[int, int]:
        x = httpclient.InferInput("TOKEN", [1, 1], "INT32")
        x.set_data_from_numpy(np.array([[tok]], np.int32))
        res = triton.http_client().infer("decode", [x])
        return int(res.as_numpy("NEXT_TOKEN")[0, 0]), int(res.as_numpy("BATCH_SIZE")[0, 0])

    toks = [4 + (i * 7) % 90 for i in range(96)]
    with fake_pb.installed():
        want = [t for s in range(0, 96, 32) for t in model.step(np.asarray(toks[s:s + 32], np.int32)).tolist()]
    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(infer, toks))
    assert [g for g, _ in got] == want
    assert max(b for _, b in got) > 1, "16 concurrent clients never shared an execution"
    x = httpclient.InferInput("TOKEN", [1, 1], "INT32")
    x.set_data_from_numpy(np.array([[VOCAB_SIZE + 1]], np.int32))
    with pytest.raises(Exception, match="TOKEN"):
        triton.http_client().infer("decode", [x])
    assert infer(toks[0])[0] == want[0]
