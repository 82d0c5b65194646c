"""`bench fidelity`'s service-time variability, without a server: trace parsing, the fit, the trace files.

The real-server run is `tests/test_bench_runs.py::test_fidelity_small`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from batchlab.bench.fidelity import ExecutionTrace, executions_from_trace, fit_variability, lognormal_quantile
from batchlab.server import TritonServer
from batchlab.sim.service import Lognormal, Resampled, Table

TAB = Table((1, 8, 32), (2.0, 12.0, 44.0), unit="ms")


def _trace(tid: int, c0: int, c1: int, model: str = "embed") -> list[dict]:
    """One traced request as Triton 2.51 writes it: a header object, then one object per timestamp."""
    return [{"id": tid, "model_name": model, "model_version": 1, "request_id": str(tid)},
            {"id": tid, "timestamps": [{"name": "REQUEST_START", "ns": c0 - 50}]},
            {"id": tid, "timestamps": [{"name": "COMPUTE_START", "ns": c0}]},
            {"id": tid, "timestamps": [{"name": "COMPUTE_END", "ns": c1}]}]


def test_requests_sharing_compute_stamps_are_one_execution() -> None:
    entries = (_trace(1, 1000, 3000) + _trace(2, 1000, 3000) + _trace(3, 5000, 6500)
               + _trace(4, 9000, 9900, model="other") + [{"id": 5, "timestamps": [{"name": "COMPUTE_START", "ns": 1}]}])
    assert executions_from_trace(entries) == {2: [2.0], 1: [1.5]}


def test_a_lognormal_spread_is_fitted_as_one() -> None:
    rng = np.random.default_rng(1)
    sigma = np.sqrt(np.log1p(0.3 ** 2))
    samples = {b: list(TAB.time(b) * 1e6 * rng.lognormal(-sigma ** 2 / 2, sigma, 600)) for b in (1, 8, 32)}
    fit = fit_variability(TAB, samples)
    assert fit["model"] == "lognormal" and fit["json"]["lognormal_cv"] == pytest.approx(0.3, rel=0.1)
    assert isinstance(fit["make"](3), Lognormal) and fit["make"](3).cv == pytest.approx(0.3, rel=0.1)
    assert fit["json"]["executions"] == 1800 and fit["json"]["executions_by_batch_size"]["8"] == 600


def test_a_heavier_tail_than_the_lognormal_is_resampled() -> None:
    rng = np.random.default_rng(2)
    # mostly tight, 3 % of executions 4x longer (preempted by another process): a lognormal with
    # the same cv puts its p99 far from the measured one
    x = np.where(rng.random(3000) < 0.03, 4.0, 1.0) * rng.lognormal(0, 0.05, 3000)
    samples = {1: list(TAB.time(1) * 1e6 * x)}
    fit = fit_variability(TAB, samples)
    assert fit["model"] == "resampled", fit["json"]
    q = fit["json"]["time_over_mean_quantiles"]["p99"]
    assert abs(q["lognormal"] / q["measured"] - 1) > 0.15
    svc = fit["make"](0)
    assert isinstance(svc, Resampled) and svc.time(8) == TAB.time(8)


def test_slow_executions_in_runs_are_drawn_in_blocks() -> None:
    from batchlab.bench.fidelity import BLOCK, autocorrelation

    rng = np.random.default_rng(4)
    sigma = np.sqrt(np.log1p(0.2 ** 2))
    z = np.zeros(2000)  # an AR(1) log-time: slow stretches last tens of executions
    for k in range(1, z.size):
        z[k] = 0.9 * z[k - 1] + np.sqrt(1 - 0.81) * rng.standard_normal()
    sizes = rng.choice([1, 8, 32], z.size)
    seq = [(int(b), TAB.time(int(b)) * 1e6 * float(np.exp(sigma * v - sigma ** 2 / 2))) for b, v in zip(sizes, z)]
    samples = {b: [us for bb, us in seq if bb == b] for b in (1, 8, 32)}
    fit = fit_variability(TAB, samples, seq)
    assert fit["model"] == "block_resampled", fit["json"]["why"]
    assert fit["json"]["autocorrelation_of_log_time_over_mean"]["lag1"] == pytest.approx(0.9, abs=0.05)
    svc = fit["make"](1)
    assert isinstance(svc, Resampled) and svc.block == BLOCK
    # the same times shuffled: no runs, so the tail test decides (a lognormal here)
    order = rng.permutation(len(seq))
    fit = fit_variability(TAB, samples, [seq[i] for i in order])
    assert fit["model"] == "lognormal" and abs(fit["json"]["autocorrelation_of_log_time_over_mean"]["lag1"]) < 0.1
    assert fit_variability(TAB, samples)["json"]["autocorrelation_of_log_time_over_mean"] is None  # no order given
    ac = autocorrelation(np.array([1.0, -1.0] * 50), lags=(1, 2, 500))
    assert ac["lag1"] == pytest.approx(-0.99) and ac["lag2"] == pytest.approx(0.98) and np.isnan(ac["lag500"])


def test_lognormal_quantile_has_mean_one_shape() -> None:
    assert lognormal_quantile(0.0, 0.99) == pytest.approx(1.0)
    sigma = np.sqrt(np.log1p(0.5 ** 2))
    assert lognormal_quantile(0.5, 0.5) == pytest.approx(np.exp(-sigma ** 2 / 2))


class _FakeServer:
    http_url = "127.0.0.1:9"
    http_headers: dict = {}

    def __init__(self, path: Path) -> None:
        self.trace_path = path


def test_trace_files_are_read_once_each(tmp_path: Path) -> None:
    trace = ExecutionTrace(_FakeServer(tmp_path / "trace.json"))
    (tmp_path / "trace.json.0").write_text(json.dumps(_trace(1, 0, 1000) + _trace(2, 0, 1000)))
    assert trace.executions() == {2: [1.0]}
    (tmp_path / "trace.json.1").write_text(json.dumps(_trace(3, 2000, 4000)))
    (tmp_path / "trace.json.2").write_text('[{"id": 4, "times')  # still being written
    assert trace.executions() == {1: [2.0]}
    (tmp_path / "trace.json.2").write_text(json.dumps(_trace(4, 5000, 8000)))
    assert trace.executions() == {1: [3.0]}


def test_no_trace_file_means_no_variable_model() -> None:
    class External:
        http_url = "127.0.0.1:9"
    trace = ExecutionTrace(External())
    assert not trace.available and "TRITON_URL" in trace.why
    with trace:  # sends nothing
        pass
    assert trace.executions() == {}


def test_the_launcher_puts_the_trace_file_in_its_private_folder(tmp_path: Path) -> None:
    server = TritonServer(models=["embed"], trace=True)
    server._workdir, server.ports, server.shm_prefix, server.key = tmp_path, {"http": 1, "grpc": 2, "metrics": 3}, "p_", "k"
    cmd, _ = server._command(tmp_path)
    assert server.trace_path == tmp_path / "trace.json"
    assert f"--trace-config=triton,file={tmp_path / 'trace.json'}" in cmd and "--trace-config=level=OFF" in cmd
    plain = TritonServer(models=["embed"])
    plain._workdir, plain.ports, plain.shm_prefix, plain.key = tmp_path, server.ports, "p_", "k"
    assert plain.trace_path is None and not any(a.startswith("--trace-config") for a in plain._command(tmp_path)[0])


def test_a_schedule_is_split_into_equal_windows_that_start_at_zero() -> None:
    from batchlab.bench.common import split_schedule

    a = np.array([0.1, 0.9, 1.0, 2.5, 3.99])
    cuts = split_schedule(a, 4, 4.0)
    assert [a[s].tolist() for s in cuts] == [[0.1, 0.9], [1.0], [2.5], [3.99]]
    assert (a[cuts[2]] - 2 * 1.0).tolist() == [0.5]
    assert sum(s.stop - s.start for s in cuts) == a.size
    assert [a[s].size for s in split_schedule(np.array([]), 3, 1.0)] == [0, 0, 0]
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        split_schedule(a, 0, 4.0)


@pytest.mark.parametrize("rounds, order", [(1, "AL"), (2, "ALLA"), (3, "ALLAAL"), (4, "ALLAALLA")])
def test_interleaving_is_abba_with_as_many_of_each(rounds: int, order: str) -> None:
    from batchlab.bench.common import interleaved_order

    got = interleaved_order(rounds)
    assert "".join(got) == order and got.count("A") == got.count("L") == rounds


def test_a_segmented_prediction_pools_segments_each_from_an_idle_server() -> None:
    from batchlab.bench.fidelity import _predict
    from batchlab.sim.dynamic import simulate_dynamic

    svc = Table((1, 32), (4.0, 40.0), unit="ms")
    rng = np.random.default_rng(3)
    # the first segment ends in a burst of 200: laid end to end, the second would queue behind it
    segs = [np.sort(np.r_[rng.uniform(0, 1.9, 300), np.full(200, 1.99)]), np.sort(rng.uniform(0, 2.0, 500))]
    pooled = _predict(segs, svc, overhead_ms=1.0)
    lat, done, span = [], 0, 0.0
    for s in segs:
        r = simulate_dynamic(s, svc, 32, warmup=0.0).records
        lat.append((r["finish"] - r["arrival"]) * 1e3 + 1.0)
        done, span = done + r.size, span + float(r["finish"].max() - r["arrival"].min())
    x = np.concatenate(lat)
    assert pooled["p50_ms"] == pytest.approx(np.percentile(x, 50))
    assert pooled["p99_ms"] == pytest.approx(np.percentile(x, 99))
    assert pooled["throughput_rps"] == pytest.approx(done / span)
    # not the same as one schedule laid end to end: each segment starts from an idle server
    one = _predict([np.concatenate([segs[0], segs[1] + 2.0])], svc, overhead_ms=1.0)
    assert one["p50_ms"] > pooled["p50_ms"] + 0.3 and one["p99_ms"] > pooled["p99_ms"]


def _stats(times_ms: dict[int, tuple[int, float]]):
    """ModelStats whose batch size b ran `count` executions of `ms` each (all in compute_infer)."""
    from batchlab.load import ModelStats

    return ModelStats(model="embed", batches={b: {"compute_infer": (c, int(c * ms * 1e6))}
                                              for b, (c, ms) in times_ms.items()})


def test_sizes_the_at_rate_run_lacks_are_scaled_by_its_drift() -> None:
    from batchlab.bench.fidelity import at_rate_service

    pooled = _stats({1: (50, 4.0), 2: (50, 6.0), 16: (10, 30.0), 32: (10, 50.0)})
    at_rate = _stats({1: (40, 3.6), 2: (30, 5.4), 16: (2, 20.0)})  # 10 % faster; size 16 too rare to take
    svc, taken, scale = at_rate_service(pooled, at_rate)
    assert taken == [1, 2]
    # the run's busy time over what the calibration prices its executions at (size 16 included)
    assert scale == pytest.approx((40 * 3.6 + 30 * 5.4 + 2 * 20.0) / (40 * 4.0 + 30 * 6.0 + 2 * 30.0))
    by = dict(zip(svc["sizes"].tolist(), svc["smooth_ms"].tolist()))
    assert by[1] == pytest.approx(3.6) and by[2] == pytest.approx(5.4)
    assert by[16] == pytest.approx(30.0 * scale) and by[32] == pytest.approx(50.0 * scale)
    # nothing taken from the run: the calibration as it is
    svc, taken, scale = at_rate_service(pooled, _stats({1: (2, 3.0)}))
    assert taken == [] and scale == 1.0 and svc["smooth_ms"].tolist() == pytest.approx([4.0, 6.0, 30.0, 50.0])


def test_turnaround_counts_only_gaps_with_work_waiting() -> None:
    from batchlab.bench.fidelity import turnaround_from_trace

    def req(tid, queued, c0, c1):
        return [{"id": tid, "model_name": "embed"},
                {"id": tid, "timestamps": [{"name": "QUEUE_START", "ns": queued}, {"name": "COMPUTE_START", "ns": c0},
                                           {"name": "COMPUTE_END", "ns": c1}]}]
    entries = (req(1, 0, 0, 1000) + req(2, 500, 1300, 2300)  # 2 queued during 1's execution: gap 300 ns
               + req(3, 900, 1300, 2300)                     # same execution as 2
               + req(4, 5000, 5000, 6000))                   # arrived to an idle instance: no gap counted
    assert turnaround_from_trace(entries) == [pytest.approx(0.3)]


def test_replicate_reports_a_second_measurement_against_the_first() -> None:
    from batchlab.bench.common import replicate

    from batchlab.bench.common import not_reproducible

    out = replicate({"p50": 11.0, "p99": 30.0}, {"p50": 10.0, "p99": 40.0}, {"p50": 0.1, "p99": 0.2})
    assert out["measured"] == {"p50": 11.0, "p99": 30.0}
    assert out["difference"] == {"p50": pytest.approx(0.1), "p99": pytest.approx(-0.25)}
    assert out["within_goal_of_each_other"] == {"p50": True, "p99": False}
    assert not_reproducible({"light": {"runs_at_its_rate_measured": out}, "other": {}}, "x.") == ["x.light.p99"]


def test_the_candidate_that_predicts_the_runs_at_rate_is_chosen() -> None:
    from batchlab.bench.fidelity import choose_by_runs_at_rate
    from batchlab.load import LoadReport
    from batchlab.load.records import RequestRecord, Records
    from batchlab.sim.dynamic import simulate_dynamic
    from batchlab.sim.workload import poisson

    truth = Lognormal(TAB, 0.1, seed=9)
    runs = []
    for j in range(2):  # two "runs at the level's rate": the true server is the lognormal one, + 1 ms
        a = poisson(300.0, 1500, seed=20 + j)
        res = simulate_dynamic(a, truth, 32, warmup=0.0).to_arrays()
        recs = [RequestRecord(index=i, sent=float(t), scheduled=float(t), first=float(t + lat + 1e-3),
                              last=float(t + lat + 1e-3), responses=1)
                for i, (t, lat) in enumerate(zip(a, res["latency"]))]
        runs.append(LoadReport(model="embed", mode="open", protocol="grpc", records=Records.from_list(recs),
                               wall_s=float(a[-1]), client_cpu_s=0.0))
    heavy = tuple([0.5] * 90 + [5.5] * 10)  # the same mean, a far heavier tail
    var = {"model": "resampled", "make": lambda s: Resampled(TAB, heavy, s),
           "candidates": {"lognormal": lambda s: Lognormal(TAB, 0.1, s), "resampled": lambda s: Resampled(TAB, heavy, s)},
           "json": {"model": "resampled", "why": "rule"}}
    out = choose_by_runs_at_rate(var, runs, overhead_ms=1.0, seed=1, spread=None, turnaround_us=0.0)
    assert out["model"] == "lognormal" and out["json"]["rule_would_pick"] == "resampled"
    errs = out["json"]["error_on_runs_at_its_rate"]
    assert abs(errs["lognormal"]["p99"]) < 0.1 < abs(errs["resampled"]["p99"])
    assert isinstance(out["make"](0), Lognormal)
    single = {**var, "candidates": {"resampled": var["make"]}}  # one candidate: nothing to choose
    assert choose_by_runs_at_rate(single, runs, 1.0, 1, None, 0.0) is single


def test_a_server_that_stopped_answering_stops_the_benchmark() -> None:
    from batchlab.bench.common import BenchError, require_answers
    from batchlab.load import LoadReport
    from batchlab.load.records import RequestRecord, Records

    def report(errors):
        recs = [RequestRecord(index=i, sent=0.01 * i, first=0.01 * i + 0.005, last=0.01 * i + 0.005, responses=1,
                              error=e) for i, e in enumerate(errors)]
        return LoadReport(model="embed", mode="open", protocol="grpc", records=Records.from_list(recs),
                          wall_s=1.0, client_cpu_s=0.0)
    ok = report([None] * 10)
    assert require_answers(ok, "light") is ok
    refused = report([None] * 9 + ["[StatusCode.UNAVAILABLE] exceeds maximum queue size"])
    assert require_answers(refused, "light") is refused  # a scheduler's refusal is an answer
    gone = report([None] * 9 + ["[StatusCode.UNAVAILABLE] failed to connect to all addresses: Connection refused"])
    with pytest.raises(BenchError, match="stopped answering"):
        require_answers(gone, "light")
    late = report([None] * 9 + ["[StatusCode.DEADLINE_EXCEEDED] Deadline Exceeded"])
    with pytest.raises(BenchError, match=r"light: 1 of 10 requests failed \(\[StatusCode.DEADLINE_EXCEEDED\]"):
        require_answers(late, "light")
    with pytest.raises(BenchError, match="10 of 10"):
        require_answers(report(["[StatusCode.INTERNAL] model crashed"] * 10), "medium")
    one_bad = report([None] * 9 + ["[StatusCode.INTERNAL] model crashed"])
    assert require_answers(one_bad, "medium") is one_bad  # a failed answer is counted by the level, not fatal
