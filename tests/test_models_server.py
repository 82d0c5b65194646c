"""The course model repository on the real embedded Triton server (session fixture `triton`).

Outputs under concurrency equal single-client outputs (and the local `batchlab.lm`), the
statistics extension shows real batches, sequence state is isolated and reclaimed, streams are
ordered and end with a final response, and every kind of bad input gets an error while the
next good request succeeds.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from batchlab.lm import VOCAB_SIZE, ToyLM, encode, generate
from batchlab.lm.vocab import ARTICLE
from batchlab.load.stats import ModelStats, read_stats, settle

pytestmark = pytest.mark.server

CLIENTS = {"http": httpclient, "grpc": grpcclient}


def client_of(triton, protocol: str):
    return triton.http_client() if protocol == "http" else triton.grpc_client()


def make_input(module, name: str, array: np.ndarray):
    dtype = {np.dtype(np.int32): "INT32", np.dtype(np.int64): "INT64",
             np.dtype(np.float32): "FP32", np.dtype(bool): "BOOL",
             np.dtype(np.uint64): "UINT64"}[array.dtype]
    x = module.InferInput(name, list(array.shape), dtype)
    x.set_data_from_numpy(array)
    return x


def batches_since(triton, model: str, before: ModelStats, requests: int) -> dict[int, int]:
    """Executions per batch size since `before`, once the statistics count `requests` more requests
    (Triton counts a request after its answer is out)."""
    after = settle(lambda: read_stats(triton.http_client(), model), before, requests)
    return {b: n for b, n in (after - before).batch_histogram().items() if n > 0}


def article_rows(n: int, seed: int, length: int = 16) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = np.zeros((n, length), np.int32)
    for r in range(n):
        k = int(rng.integers(1, length + 1))
        start = int(rng.integers(0, len(ARTICLE) - k))
        ids = encode(ARTICLE[start:start + k - 1])
        rows[r, :ids.size] = ids
    return rows


def prompt(i: int) -> np.ndarray:
    start = (i * 997) % (len(ARTICLE) - 40)
    return encode(ARTICLE[start:start + 3 + i % 17])


# --------------------------------------------------------------------------- embed

@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_embed_under_32_concurrent_clients_equals_single_client(triton, protocol):
    module = CLIENTS[protocol]
    rows = article_rows(96, seed=1 if protocol == "http" else 2)
    single = triton.http_client()
    alone = [single.infer("embed", [make_input(httpclient, "TOKENS", rows[i:i + 1])])
             .as_numpy("EMBEDDING")[0] for i in range(len(rows))]
    np.testing.assert_array_equal(np.stack(alone), ToyLM.default().embed(rows))
    before = read_stats(triton.http_client(), "embed")

    def worker(k: int) -> list[tuple[int, np.ndarray, int]]:
        client = client_of(triton, protocol)
        out = []
        for i in range(k, len(rows), 32):
            res = client.infer("embed", [make_input(module, "TOKENS", rows[i:i + 1])])
            out.append((i, res.as_numpy("EMBEDDING")[0], int(res.as_numpy("BATCH_SIZE")[0, 0])))
        return out

    with ThreadPoolExecutor(32) as pool:
        results = [r for part in pool.map(worker, range(32)) for r in part]
    assert len(results) == len(rows)
    for i, emb, _ in results:
        assert np.array_equal(emb, alone[i]), f"row {i} changed under batching"
    delta = batches_since(triton, "embed", before, len(rows))
    assert sum(b * n for b, n in delta.items()) == len(rows)
    assert max(delta) > 1, f"no batch larger than 1 under 32 clients: {delta}"
    assert max(bs for _, _, bs in results) > 1


def test_embed_nobatch_never_batches(triton):
    rows = article_rows(32, seed=3)
    before = read_stats(triton.http_client(), "embed_nobatch")

    def worker(i: int) -> None:
        triton.http_client().infer("embed_nobatch", [make_input(httpclient, "TOKENS",
                                                                rows[i:i + 1])])

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(worker, range(len(rows))))
    assert batches_since(triton, "embed_nobatch", before, len(rows)) == {1: len(rows)}


# --------------------------------------------------------------------------- generate

@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_generate_under_concurrency_matches_solo_and_reports_padding(triton, protocol):
    module = CLIENTS[protocol]
    lm = ToyLM.default()
    n = 32
    specs = [(prompt(i), 2 + (i * 5) % 11, i % 3 == 0) for i in range(n)]
    expected = [generate(lm, p, m, ignore_eos=e) for p, m, e in specs]

    def one(i: int):
        p, m, e = specs[i]
        res = client_of(triton, protocol).infer("generate", [
            make_input(module, "PROMPT", p[None]),
            make_input(module, "MAX_TOKENS", np.array([[m]], np.int32)),
            make_input(module, "IGNORE_EOS", np.array([[e]], bool))])
        return {k: res.as_numpy(k) for k in
                ("TOKENS", "NUM_TOKENS", "BATCH_STEPS", "PADDED_STEPS", "BATCH_SIZE")}

    # single client first: it equals the local LM, so comparing to `expected` below is
    # comparing to the single-client outputs
    for i in range(0, n, 8):
        assert one(i)["TOKENS"][0].tolist() == expected[i]
    before = read_stats(triton.http_client(), "generate")
    with ThreadPoolExecutor(n) as pool:
        outs = list(pool.map(one, range(n)))
    for out, exp in zip(outs, expected):
        assert out["TOKENS"][0].tolist() == exp
        assert out["NUM_TOKENS"].item() == len(exp)
        assert out["PADDED_STEPS"].item() == out["BATCH_STEPS"].item() - len(exp)
        assert out["BATCH_STEPS"].item() >= len(exp)
    delta = batches_since(triton, "generate", before, n)
    assert max(delta) > 1, f"generate never batched: {delta}"
    assert max(o["BATCH_SIZE"].item() for o in outs) > 1
    assert any(o["PADDED_STEPS"].item() > 0 for o in outs)  # padding is visible


def test_long_prompts_give_the_local_lms_tokens(triton):
    # The server's stubs run OpenBLAS with 1 thread, this process with its default: long
    # prompts make BLAS split the attention matmuls differently, which must not matter.
    lm = ToyLM.default()
    client = triton.grpc_client()
    for i, length in enumerate((120, 200, 250)):
        start = 500 + 1000 * i
        p = encode(ARTICLE[start:start + length - 1])
        res = client.infer("generate", [
            make_input(grpcclient, "PROMPT", p[None]),
            make_input(grpcclient, "MAX_TOKENS", np.array([[8]], np.int32)),
            make_input(grpcclient, "IGNORE_EOS", np.array([[True]], bool))])
        assert res.as_numpy("TOKENS")[0].tolist() == generate(lm, p, 8, ignore_eos=True)


# --------------------------------------------------------------------------- lm_step

def run_sequence(triton, model: str, corr: int, p: np.ndarray, steps: int, protocol: str,
                 barrier: threading.Barrier | None = None) -> tuple[list[int], list[int]]:
    module = CLIENTS[protocol]
    client = client_of(triton, protocol)
    tokens, sizes = [], []
    for k in range(steps):
        inputs = [make_input(module, "TOKENS", p[None])] if k == 0 else []
        res = client.infer(model, inputs, sequence_id=corr, sequence_start=(k == 0),
                           sequence_end=(k == steps - 1))
        tokens.append(int(res.as_numpy("TOKEN")[0, 0]))
        sizes.append(int(res.as_numpy("BATCH_SIZE")[0, 0]))
        if barrier is not None and k == 0:
            barrier.wait(timeout=30)
    return tokens, sizes


@pytest.mark.parametrize("model,protocol", [("lm_step", "grpc"), ("lm_step", "http"),
                                            ("lm_step_oldest", "grpc")])
def test_lm_step_interleaved_sequences_are_isolated(triton, model, protocol):
    lm = ToyLM.default()
    n = 8
    base = {"lm_step": 1000, "lm_step_oldest": 2000}[model] + (500 if protocol == "http" else 0)
    specs = [(base + i, prompt(i + 40), 4 + i % 5) for i in range(n)]
    expected = [generate(lm, p, s, ignore_eos=True) for _, p, s in specs]
    barrier = threading.Barrier(n)
    with ThreadPoolExecutor(n) as pool:
        outs = list(pool.map(lambda s: run_sequence(triton, model, s[0], s[1], s[2], protocol,
                                                    barrier), specs))
    for (tokens, _), exp in zip(outs, expected):
        assert tokens == exp
    assert max(max(sizes) for _, sizes in outs) > 1, "sequences never shared an execution"


def test_lm_step_idle_sequence_is_reclaimed(triton):
    client = triton.grpc_client()
    p = encode("一口锅")

    def start(corr):
        return client.infer("lm_step", [make_input(grpcclient, "TOKENS", p[None])],
                            sequence_id=corr, sequence_start=True)

    start(7001)                     # abandoned: no END ever comes
    live = int(start(7002).as_numpy("LIVE_SEQUENCES")[0, 0])
    assert live >= 2
    client.infer("lm_step", [], sequence_id=7002, sequence_end=True)
    time.sleep(3.0 + 0.5 + 0.6)     # idle timeout + model margin + reaper period
    with pytest.raises(InferenceServerException, match="START"):
        client.infer("lm_step", [], sequence_id=7001)
    res = start(7003)
    assert int(res.as_numpy("LIVE_SEQUENCES")[0, 0]) == 1      # 7001's KV cache is gone
    assert int(res.as_numpy("KV_TOKENS")[0, 0]) == p.size
    client.infer("lm_step", [], sequence_id=7003, sequence_end=True)


# --------------------------------------------------------------------------- streaming

def stream_generate(triton, model: str, jobs: list[tuple[np.ndarray, int]], first_id: int,
                    timeout: float = 60.0) -> dict[str, list[dict]]:
    """Send every job on one gRPC stream; collect responses per request id until all finals."""
    client = triton.grpc_client()
    q: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: q.put((result, error)))
    try:
        for k, (p, m) in enumerate(jobs):
            iterative = model == "lm_iterative"
            inputs = [make_input(grpcclient, "PROMPT", p[None] if iterative else p),
                      make_input(grpcclient, "MAX_TOKENS",
                                 np.array([[m]] if iterative else [m], np.int32)),
                      make_input(grpcclient, "IGNORE_EOS",
                                 np.array([[True]] if iterative else [True], bool))]
            extra = dict(sequence_id=first_id + k, sequence_start=True) if iterative else {}
            client.async_stream_infer(model, inputs, request_id=str(k),
                                      enable_empty_final_response=True, **extra)
        got: dict[str, list[dict]] = {str(k): [] for k in range(len(jobs))}
        done = 0
        deadline = time.monotonic() + timeout
        while done < len(jobs):
            result, error = q.get(timeout=max(0.1, deadline - time.monotonic()))
            assert error is None, f"stream error: {error}"
            resp = result.get_response()
            final = resp.parameters["triton_final_response"].bool_param
            item = {"final": final}
            if result.as_numpy("TOKEN") is not None:
                item.update({k: int(result.as_numpy(k).ravel()[0]) for k in
                             ("TOKEN", "INDEX", "BATCH_SIZE" if model == "lm_iterative"
                              else "ACTIVE", *(("T_NS",) if model == "lm_stream" else ()))})
                item["got_ns"] = time.monotonic_ns()
            got[resp.id].append(item)
            done += final
        return got
    finally:
        client.stop_stream()


@pytest.mark.parametrize("model", ["lm_iterative", "lm_stream"])
def test_streams_arrive_in_order_end_final_and_match_solo(triton, model):
    lm = ToyLM.default()
    jobs = [(prompt(i + 80), 3 + (i * 7) % 13) for i in range(12)]   # 12 > 8 slots
    start_ns = time.monotonic_ns()
    got = stream_generate(triton, model, jobs, first_id=9000 if model == "lm_iterative" else 0)
    key = "BATCH_SIZE" if model == "lm_iterative" else "ACTIVE"
    sizes = []
    for k, (p, m) in enumerate(jobs):
        items = got[str(k)]
        assert items[-1]["final"] and not any(i["final"] for i in items[:-1])
        data = [i for i in items if "TOKEN" in i]
        assert [i["INDEX"] for i in data] == list(range(m)), "tokens out of order"
        assert [i["TOKEN"] for i in data] == generate(lm, p, m, ignore_eos=True)
        sizes += [i[key] for i in data]
        if model == "lm_stream":  # T_NS: the server's clock (the same monotonic clock) when the step ended
            sent = [i["T_NS"] for i in data]
            assert all(a < b for a, b in zip(sent, sent[1:])), f"T_NS not one step per token: {sent}"
            assert all(start_ns < i["T_NS"] <= i["got_ns"] for i in data), "T_NS outside send…receive"
    assert max(sizes) > 1 and max(sizes) <= 8


def test_lm_stream_cancelled_sequence_is_freed(triton):
    client = triton.grpc_client()
    q: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: q.put((result, error)))
    inputs = [make_input(grpcclient, "PROMPT", encode("一口锅")),
              make_input(grpcclient, "MAX_TOKENS", np.array([250], np.int32)),
              make_input(grpcclient, "IGNORE_EOS", np.array([True]))]
    client.async_stream_infer("lm_stream", inputs, request_id="long")
    for _ in range(3):
        result, error = q.get(timeout=30)
        assert error is None
    client.stop_stream(cancel_requests=True)
    # The cancelled request had ~245 tokens to go; if it were not freed it would share every
    # step of this 30-token request (ACTIVE 2 throughout).
    got = stream_generate(triton, "lm_stream", [(encode("拼锅"), 30)], first_id=0)
    actives = [i["ACTIVE"] for i in got["0"] if "ACTIVE" in i]
    assert len(actives) == 30 and actives[-20:] == [1] * 20, \
        f"the cancelled sequence still runs: ACTIVE={actives}"


# --------------------------------------------------------------------------- bad inputs

def expect_error(call, match: str) -> None:
    with pytest.raises(InferenceServerException, match=match):
        call()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bad_inputs_get_errors_and_the_next_request_succeeds(triton, protocol):
    m = CLIENTS[protocol]
    c = client_of(triton, protocol)
    good_row = article_rows(1, seed=9)

    def embed(tokens):
        return c.infer("embed", [make_input(m, "TOKENS", tokens)])

    expect_error(lambda: embed(np.full((1, 16), VOCAB_SIZE, np.int32)), "vocabulary")
    expect_error(lambda: embed(np.zeros((1, 16), np.int32)), "starts with <pad>")
    expect_error(lambda: embed(np.ones((1, 8), np.int32)), "unexpected shape")  # Triton checks
    expect_error(lambda: embed(np.ones((1, 16), np.float32)), "data-type")
    expect_error(lambda: embed(np.ones((33, 16), np.int32)), "batch-size must be <= 32")
    assert embed(good_row).as_numpy("EMBEDDING").shape == (1, 256)

    def gen(p, n, **extra):
        inputs = [make_input(m, "PROMPT", np.asarray(p, np.int32)[None]),
                  make_input(m, "MAX_TOKENS", np.array([[n]], np.int32))]
        inputs += [make_input(m, k, v) for k, v in extra.items()]
        return c.infer("generate", inputs)

    expect_error(lambda: gen([1, VOCAB_SIZE + 1], 3), "vocabulary")
    expect_error(lambda: gen(np.full(300, 5), 3), "limit is 256")
    expect_error(lambda: gen([1, 5], 0), "MAX_TOKENS")
    expect_error(lambda: gen([1, 5], 3, TEMPERATURE=np.array([[-1.0]], np.float32)),
                 "temperature")
    expect_error(lambda: gen([1, 0, 5], 3), "<pad>")
    assert gen(encode("一口锅"), 3).as_numpy("NUM_TOKENS").item() >= 1


def test_bad_inputs_in_a_concurrent_batch_do_not_hurt_the_good_ones(triton):
    rows = article_rows(24, seed=5)
    bad = np.full((1, 16), VOCAB_SIZE, np.int32)
    single = triton.http_client()
    alone = [single.infer("embed", [make_input(httpclient, "TOKENS", rows[i:i + 1])])
             .as_numpy("EMBEDDING")[0] for i in range(len(rows))]

    def one(i: int):
        client = triton.grpc_client()
        tokens = bad if i % 3 == 0 else rows[i:i + 1]
        try:
            return i, client.infer("embed", [make_input(grpcclient, "TOKENS", tokens)]
                                   ).as_numpy("EMBEDDING")[0]
        except InferenceServerException as exc:
            return i, str(exc)

    with ThreadPoolExecutor(24) as pool:
        for i, out in pool.map(one, range(len(rows))):
            if i % 3 == 0:
                assert "vocabulary" in out
            else:
                assert np.array_equal(out, alone[i])


def test_bad_sequence_and_stream_inputs(triton):
    c = triton.grpc_client()
    expect_error(lambda: c.infer("lm_step", [], sequence_id=31, sequence_start=True),
                 "must carry the prompt")
    # Triton opened sequence 31 all the same: END closes its slot (the model answers the error)
    expect_error(lambda: c.infer("lm_step", [], sequence_id=31, sequence_end=True), "no KV cache")
    expect_error(lambda: c.infer("lm_step", [make_input(grpcclient, "TOKENS",
                                                        np.array([[1, VOCAB_SIZE]], np.int32))],
                                 sequence_id=32, sequence_start=True, sequence_end=True),
                 "vocabulary")
    expect_error(lambda: c.infer("lm_step", [], sequence_id=33), "START")
    tokens, _ = run_sequence(triton, "lm_step", 34, encode("拼锅"), 2, "grpc")
    assert len(tokens) == 2
    # streams: an error response ends the request; the stream keeps working
    q: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    try:
        c.async_stream_infer("lm_stream", [
            make_input(grpcclient, "PROMPT", np.array([1, VOCAB_SIZE], np.int32)),
            make_input(grpcclient, "MAX_TOKENS", np.array([3], np.int32))])
        _, error = q.get(timeout=20)
        assert error is not None and "vocabulary" in str(error)
        c.async_stream_infer("lm_iterative", [
            make_input(grpcclient, "PROMPT", encode("锅")[None]),
            make_input(grpcclient, "MAX_TOKENS", np.array([[999]], np.int32))],
            sequence_id=35, sequence_start=True)
        _, error = q.get(timeout=20)
        assert error is not None and "MAX_TOKENS" in str(error)
        c.async_stream_infer("lm_iterative", [
            make_input(grpcclient, "PROMPT", encode("锅")[None]),
            make_input(grpcclient, "MAX_TOKENS", np.array([[3]], np.int32))],
            sequence_id=37, sequence_start=True, sequence_end=True)
        _, error = q.get(timeout=20)
        assert error is not None and "without sequence_end" in str(error)
    finally:
        c.stop_stream()
    got = stream_generate(triton, "lm_iterative", [(encode("一口锅"), 3)], first_id=36)
    assert [i["INDEX"] for i in got["0"] if "INDEX" in i] == [0, 1, 2]
