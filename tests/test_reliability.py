"""Reliability of the load generator against the course's `embed` models on the real server.

5,000 requests from 64 concurrent clients: every one answered, every answer the right one for
its own request (each request's expected embedding is computed locally: the toy LM is batch
invariant, so the server's answer must be bit-identical), nothing lost or duplicated (the
server's own counters agree). Then an overload against `embed_queue` (max_queue_size 16):
rejections are reported as rejections with Triton's message, nothing hangs, and the server is
healthy afterwards.
"""

from __future__ import annotations

import numpy as np
import pytest

from batchlab.bench.common import embed_prompts
from batchlab.load import RequestSpec, read_stats, run_closed_loop, run_open_loop

pytestmark = pytest.mark.server

N_REQUESTS = 5_000  # ~80 per client: every client is reused many times, the prompts cycle ~5 times
CONCURRENCY = 64
N_PROMPTS = 1024  # distinct prompts: far more than the 64 in flight, so a swapped answer shows


@pytest.fixture(scope="module")
def prompts_and_embeddings() -> tuple[np.ndarray, np.ndarray]:
    from batchlab.lm import ToyLM

    prompts = embed_prompts(N_PROMPTS, seed=11)
    return prompts, ToyLM.default().embed(prompts)


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


def test_checks_catch_a_swapped_answer(triton, prompts_and_embeddings) -> None:
    """The check can fail: expecting the neighbour's embedding is caught for every request."""
    prompts, expected = prompts_and_embeddings
    rep = run_closed_loop(triton, "embed", checked(prompts, np.roll(expected, 1, axis=0)),
                          concurrency=8, n_requests=64, stats=False)
    assert rep.n_errors == 64
    assert all("got the embedding of prompt" in e for e in rep.records.error)


def test_5000_requests_64_clients_all_answered_correctly(triton, prompts_and_embeddings) -> None:
    prompts, expected = prompts_and_embeddings
    rep = run_closed_loop(triton, "embed", checked(prompts, expected), concurrency=CONCURRENCY,
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


def test_overload_is_rejected_cleanly_and_the_server_stays_healthy(triton, prompts_and_embeddings) -> None:
    prompts, expected = prompts_and_embeddings
    before = read_stats(triton.http_url, "embed_queue")
    # ~5x what one instance can serve, for 1.5 s: the 16-place queue overflows at once
    rep = run_open_loop(triton, "embed_queue", checked(prompts, expected), rate=3000.0, duration_s=1.5,
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
    client = triton.grpc_client()
    assert client.is_server_ready() and client.is_model_ready("embed_queue")
    again = run_closed_loop(triton, "embed_queue", checked(prompts, expected), concurrency=4, n_requests=40,
                            stats=False)
    assert again.n_ok == 40
