"""`bench fidelity`: the goal judged against the noise of two measurements, its schedules and fits
(hand-computed numbers), and one short run of the CLI against the session's server."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from batchlab.bench import common
from batchlab.bench import fidelity as f
from batchlab.bench.__main__ import main
from batchlab.bench.common import BenchError
from batchlab.sim.service import Table


@pytest.mark.parametrize("pred, a, b, band, met, decided, bound", [
    (100, 110, 90, 0.05, True, "noise", 20.0),    # measured 100, band 5, noise 20: error 0
    (130, 110, 90, 0.20, False, "band", 20.0),    # error 30 > 20; band 20 == noise 20: a tie names the band
    (119, 110, 90, 0.05, True, "noise", 20.0),    # error 19 <= 20
    (121, 110, 90, 0.05, False, "noise", 20.0),   # error 21 > 20
    (108, 100, 102, 0.10, True, "band", 10.1),    # measured 101, band 10.1, noise 2: error 7
    (112, 100, 102, 0.10, False, "band", 10.1),   # error 11 > 10.1
])
def test_judge_takes_the_larger_of_band_and_noise(pred, a, b, band, met, decided, bound) -> None:
    j = f.judge(pred, a, b, band)
    assert j["measured"] == (a + b) / 2 and j["error"] == pytest.approx(pred - (a + b) / 2)
    assert j["met"] is met and j["decided_by"] == decided and max(j["band"], j["noise"]) == pytest.approx(bound)


def test_a_missing_figure_never_meets() -> None:
    assert f.judge(float("nan"), 110, 90, 0.20)["met"] is False
    assert f.judge(100, float("nan"), 90, 0.20)["met"] is False


def test_goal_met_needs_every_figure() -> None:
    ok = {"figures": {k: {"met": True} for k in f.GOALS}}
    bad = {"figures": {**ok["figures"], "p99": {"met": False}}}
    assert f.all_met({"embed": {"light": ok}, "lm_stream": {"medium": ok}})
    assert not f.all_met({"embed": {"light": ok}, "lm_stream": {"medium": bad}})


def test_segments_and_the_interleaved_order() -> None:
    arr = np.array([0.1, 0.6, 1.2, 1.9, 2.5, 3.9])
    assert [s.tolist() for s in f.segments(arr, 2, 4.0)] == [[0, 1, 2, 3], [4, 5]]
    assert [s.tolist() for s in f.segments(arr, 3, 4.0)] == [[0, 1, 2], [3, 4], [5]]
    assert "".join(x for _, x in f.ab_order(3)) == "ABBAAB"
    assert [j for j, _ in f.ab_order(3)] == [0, 0, 1, 1, 2, 2]


def test_measure_twice_runs_each_segment_as_a_and_b_from_zero(monkeypatch) -> None:
    monkeypatch.setattr(f, "pool_reports", lambda reps, label="": reps)
    calls = []
    arr = np.array([0.5, 1.5, 2.25, 3.5])

    def run(send, j, x):
        calls.append((j, x, send.tolist()))
        return (j, x)
    a, b = f.measure_twice(run, arr, f.segments(arr, 2, 4.0), 4.0)
    assert calls == [(0, "A", [0.5, 1.5]), (0, "B", [0.5, 1.5]), (1, "B", [0.25, 1.5]), (1, "A", [0.25, 1.5])]
    assert a == [(0, "A"), (1, "A")] and b == [(0, "B"), (1, "B")]


def test_predict_embed_by_hand() -> None:
    # two requests 0.5 s apart, 1 ms each alone, 2 ms overhead: latency 3 ms, 2 answers over 0.501 s
    p = f.predict_embed([np.array([0.0, 0.5])], Table((1, 2), (1.0, 1.5), unit="ms"), 2, 2.0)
    assert p["p50"] == pytest.approx(3.0) and p["p99"] == pytest.approx(3.0)
    assert p["throughput"] == pytest.approx(2 / 0.501) and p["mean_batch_size"] == 1.0


def _stream(tokens: dict[int, list[tuple[float, int, int, int, int]]]) -> tuple[SimpleNamespace, dict]:
    """A fake report and its per-token rows from (time, INDEX, ACTIVE, WAITING, KV_TOKENS) per request."""
    idx = sorted(tokens)
    rec = SimpleNamespace(index=np.array(idx), token_times=[[t[0] for t in tokens[i]] for i in idx],
                          error=[None] * len(idx))
    return SimpleNamespace(records=rec), {i: np.array([t[1:] for t in tokens[i]]) for i in idx}


def test_steps_rebuilt_from_streamed_tokens() -> None:
    # step 1 (t=0): request 0 prefills alone, 1 waiting; step 2 (t=10 ms): 0 decodes, 1 (7-token
    # prompt) prefills; step 3 (t=25 ms): both decode; step 4 (t=31 ms) lost a token: not kept
    rep, rows = _stream({0: [(0.000, 0, 1, 1, 5), (0.010, 1, 2, 0, 13), (0.025, 2, 2, 0, 15), (0.031, 3, 2, 0, 17)],
                         1: [(0.010, 0, 2, 0, 13), (0.025, 1, 2, 0, 15)]})
    steps = f.step_times(rep, rows, [np.zeros(5), np.zeros(7)])
    np.testing.assert_allclose(steps, [[1, 7, 0.010], [2, 0, 0.015]])


def test_step_cost_fit_by_hand() -> None:
    # 3000 us + 500 us per decoding sequence, + 100 us per prefill token
    dec = [[n, 0, (3000 + 500 * n) * 1e-6] for n in (1, 2, 3, 4, 5, 6, 7, 8)]
    pre = [[2, 10, (3000 + 1000 + 1000) * 1e-6], [1, 20, (3000 + 500 + 2000) * 1e-6]]
    c = f.fit_step_cost(np.array(dec + pre))
    assert (c.decode_base, c.decode_per_seq, c.prefill_per_token) == pytest.approx((3000, 500, 100))
    with pytest.raises(BenchError, match="too few"):
        f.fit_step_cost(np.array(dec[:1] * 10))  # one size only


@pytest.mark.server
def test_cli_small_run(triton, monkeypatch, capsys) -> None:
    monkeypatch.setenv("TRITON_URL", triton.http_url)
    monkeypatch.setenv("TRITON_GRPC_URL", triton.grpc_url)
    monkeypatch.setenv("TRITON_METRICS_URL", triton.metrics_url)
    monkeypatch.setenv("BATCHLAB_TRITON_KEY", triton.key or "")
    monkeypatch.setattr(f, "PROBE_S", (0.5, 1.0))  # seconds: the figures mean nothing here, their bookkeeping does
    monkeypatch.setattr(f, "EMBED_LEVELS", (("medium", 0.5),))
    monkeypatch.setattr(f, "LM_LOADS", (("medium", 0.5),))
    assert main(["fidelity", "--level-s", "1", "--lm-level-s", "1", "--rounds", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    figs = [(f"{p}.medium.{k}", v) for p in ("embed", "lm_stream") for k, v in out[p]["medium"]["figures"].items()]
    assert [k for k, _ in figs] == [f"{p}.medium.{k}" for p in ("embed", "lm_stream") for k in f.GOALS]
    for name, v in figs:
        bound = max(v["band"], v["noise"])
        assert v["met"] == (abs(v["predicted"] - v["measured"]) <= bound + 2e-3)
        assert (name in out["decided_by_noise"]) == (v["decided_by"] == "noise")
    assert out["goal_met"] == all(v["met"] for _, v in figs)
    assert out["schedule"]["order"] == "ABBA"


class _CrashingServer:
    """Stands in for `server.connect`'s embedded server in `bench_server`: it dies with SIGSEGV when told to."""

    events: list[str] = []

    def __init__(self, **kw) -> None:
        self._proc = SimpleNamespace(poll=lambda: None)

    def start(self) -> "_CrashingServer":
        self.events.append("start")
        return self

    @property
    def running(self) -> bool:
        return self._proc.poll() is None

    def crash(self) -> None:
        self._proc = SimpleNamespace(poll=lambda: -11)

    def log_tail(self, n: int = 25) -> str:
        self.events.append("log read")
        return "I1204 model loaded\nSignal (11) received.\n"

    def stop(self) -> None:
        self.events.append("stop")


def test_a_lost_server_is_named_by_how_it_ended(monkeypatch) -> None:
    monkeypatch.delenv("TRITON_URL", raising=False)
    monkeypatch.setattr(common, "connect", _CrashingServer)
    with pytest.raises(BenchError, match=r"\(killed by SIGSEGV\); last line of its log: Signal \(11\) received\.$"):
        with common.bench_server(["embed"]) as server:
            server.crash()
            raise ConnectionRefusedError(111, "Connection refused")
    assert _CrashingServer.events == ["start", "log read", "stop"]  # the log is read before stop() removes it
    _CrashingServer.events.clear()
    with pytest.raises(ValueError, match="bad input"):  # a live server: the error passes through
        with common.bench_server(["embed"]):
            raise ValueError("bad input")
    assert _CrashingServer.events == ["start", "stop"]
