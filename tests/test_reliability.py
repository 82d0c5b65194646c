"""Reliability of the load generator against the course's `embed` models on the real server.

5,000 requests from 64 concurrent clients: every one answered, every answer the right one for
its own request (each request's expected embedding is computed locally: the toy LM is batch
invariant, so the server's answer must be bit-identical), nothing lost or duplicated (the
server's own counters agree). These run on a private copy of `embed` whose LM is narrower
(its `d_model` / `d_ff` parameters, as the `decode` models set theirs): the same model code,
batcher and transport, but 5,000 rows cost the server ~3 s instead of ~30 s (at the default
width the run measured the LM, not the load generator). Then an overload against `embed_queue` (max_queue_size 16):
rejections are reported as rejections with Triton's message, nothing hangs, every answered
request got its own prompt's embedding, and the server is healthy afterwards.
"""

from __future__ import annotations

import numpy as np
import pytest

from batchlab.bench.common import embed_prompts
from batchlab.config_pbtxt import edit_config, load_config_text, stage_model, to_text
from batchlab.lm import LMConfig, ToyLM
from batchlab.load import RequestSpec, read_stats, run_closed_loop, run_open_loop
from batchlab.server import TritonServer

pytestmark = pytest.mark.server

N_REQUESTS = 5_000  # ~80 per client: every client is reused many times, the prompts cycle ~5 times
CONCURRENCY = 64
N_PROMPTS = 1024  # distinct prompts: far more than the 64 in flight, so a swapped answer shows
NARROW = {"d_model": 64, "d_ff": 256}  # the private embed's LM: 1/10 of the default's cost a row


@pytest.fixture(scope="module")
def narrow(tmp_path_factory: pytest.TempPathFactory):
    """(server, prompts, embeddings): a private server with `embed` built on the NARROW LM."""
    config = edit_config(load_config_text("embed"), {
        "parameters": {k: f'string_value: "{v}"' for k, v in NARROW.items()},
        "output.0.dims": [NARROW["d_model"]]})  # output 0 is EMBEDDING
    repo = tmp_path_factory.mktemp("narrow")
    stage_model(repo, "embed", to_text(config), "embed")
    prompts = embed_prompts(N_PROMPTS, seed=11)
    with TritonServer(repo) as server:
        yield server, prompts, ToyLM(LMConfig(**NARROW)).embed(prompts)


def checked(prompts: np.ndarray, expected: np.ndarray):
    """Request i sends prompt i % N and must get back exactly that prompt's embedding."""
    def make(i: int) -> RequestSpec:
        k = i % len(prompts)

        def check(o: dict) -> str | None:
            got = o["EMBEDDING"]
            if got.shape != (1, expected.shape[1]):
                return f"shape {got.shape}"
            if not np.array_equal(got[0], expected[k]):
                j = int(np.argmin(np.abs(expected - got[0]).sum(axis=1)))
                return f"request {i} (prompt {k}) got the embedding of prompt {j}"
            return None
        return RequestSpec({"TOKENS": prompts[k:k + 1]}, outputs=("EMBEDDING",), check=check)
    return make


def kept(prompts: np.ndarray, answers: dict[int, np.ndarray]):
    """Request i sends prompt i % N; its answer is kept in `answers[i]`, checked after the run by
    `wrong_answers` (the default LM's embeddings cost ~5 ms a row: only the answered are computed)."""
    def make(i: int) -> RequestSpec:
        k = i % len(prompts)

        def keep(o: dict) -> None:
            answers[i] = o["EMBEDDING"]
        return RequestSpec({"TOKENS": prompts[k:k + 1]}, outputs=("EMBEDDING",), check=keep)
    return make


def wrong_answers(prompts: np.ndarray, answers: dict[int, np.ndarray]) -> list[str]:
    """The kept answers that are not bit-identical to the course's LM's embedding of their own prompt."""
    ks = sorted({i % len(prompts) for i in answers})
    want = dict(zip(ks, ToyLM.default().embed(prompts[ks])))
    return [f"request {i} (prompt {i % len(prompts)})" for i, got in sorted(answers.items())
            if got.shape != (1, len(want[i % len(prompts)])) or not np.array_equal(got[0], want[i % len(prompts)])]


def test_checks_catch_a_swapped_answer(narrow) -> None:
    """The check can fail: expecting the neighbour's embedding is caught for every request."""
    server, prompts, expected = narrow
    rep = run_closed_loop(server, "embed", checked(prompts, np.roll(expected, 1, axis=0)),
                          concurrency=8, n_requests=64, stats=False)
    assert rep.n_errors == 64
    assert all("got the embedding of prompt" in e for e in rep.records.error)


def test_5000_requests_64_clients_all_answered_correctly(narrow) -> None:
    server, prompts, expected = narrow
    assert expected.shape == (N_PROMPTS, NARROW["d_model"])
    rep = run_closed_loop(server, "embed", checked(prompts, expected), concurrency=CONCURRENCY,
                          n_requests=N_REQUESTS, warmup_requests=256, metrics=True, progress=None)
    s = rep.summary()
    assert s["errors"] == 0, s["error_kinds"]
    assert s["ok"] == N_REQUESTS
    assert np.array_equal(np.sort(rep.records.index), np.arange(N_REQUESTS))  # each exactly once
    assert np.all(np.isfinite(rep.records.latency))
    assert s["server"]["success"] == N_REQUESTS and s["server"]["inference_count"] == N_REQUESTS
    assert s["server"]["fail"] == 0
    assert s["metrics"]["request_success"] == N_REQUESTS
    assert s["server"]["mean_batch_size"] > 4  # 64 clients: the batcher had something to batch


def test_overload_is_rejected_cleanly_and_the_server_stays_healthy(triton) -> None:
    prompts, answers = embed_prompts(N_PROMPTS, seed=11), {}
    before = read_stats(triton.http_url, "embed_queue")
    # ~5x what one instance can serve, for 1.5 s: the 16-place queue overflows at once
    rep = run_open_loop(triton, "embed_queue", kept(prompts, answers), rate=3000.0, duration_s=1.5,
                        seed=3, request_timeout_s=30.0, metrics=True)
    s = rep.summary()
    assert s["requests"] > 3000
    assert s["rejected"] > s["requests"] // 2
    assert s["ok"] + s["rejected"] == s["requests"], s["error_kinds"]  # no other kind of failure
    (msg, count), = s["error_kinds"].items()
    assert "UNAVAILABLE" in msg and "Exceeds maximum queue size" in msg and count == s["rejected"]
    assert s["latency_ms"]["max"] < 30_000  # nothing waited for the client timeout
    assert s["server"]["success"] == s["ok"]  # every answered request was served exactly once
    after = read_stats(triton.http_url, "embed_queue")
    assert (after - before).success == s["ok"]
    assert len(answers) == s["ok"] and wrong_answers(prompts, answers) == []  # each got its own answer
    client = triton.grpc_client()
    assert client.is_server_ready() and client.is_model_ready("embed_queue")
    answers.clear()
    again = run_closed_loop(triton, "embed_queue", kept(prompts, answers), concurrency=4, n_requests=40,
                            stats=False)
    assert again.n_ok == 40 and len(answers) == 40 and wrong_answers(prompts, answers) == []


def test_a_wrong_answer_after_the_run_is_caught() -> None:
    """`wrong_answers` can fail: a neighbour's embedding, or a wrong shape, is named."""
    prompts = embed_prompts(8, seed=11)
    emb = ToyLM.default().embed(prompts)
    answers = {i: emb[i % 8][None] for i in range(10)}
    assert wrong_answers(prompts, answers) == []
    answers[9] = emb[2][None]
    answers[3] = emb[3][None, :10]
    assert wrong_answers(prompts, answers) == ["request 3 (prompt 3)", "request 9 (prompt 1)"]
