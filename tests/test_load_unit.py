"""batchlab.load without a server: schedules, records, statistics and metrics parsing, reports, plots."""

from __future__ import annotations

import asyncio
import json
import math
import time
import warnings

import numpy as np
import pytest

from batchlab.load import (LoadReport, MetricsSnapshot, ModelStats, Records, RequestRecord, RequestSpec,
                           SequenceSpec, is_rejection, poisson_arrivals)
from batchlab.load import ClientFellBehind, MetricsTimeline, run_open_loop, timeline_rows
from batchlab.load import runner
from batchlab.load.open_loop import drive_open
from batchlab.load.stats import settle
from batchlab.load.workload import as_factory
from batchlab.server import ExternalServer
from batchlab.sim.lengths import capped_exponential

# A statistics-extension answer as the gRPC client returns it (int64 as strings).
STATS_BEFORE = {"model_stats": [{
    "name": "m", "version": "1", "inference_count": "10", "execution_count": "4",
    "inference_stats": {"success": {"count": "10", "ns": "10000000"}, "fail": {},
                        "queue": {"count": "10", "ns": "2000000"},
                        "compute_input": {"count": "10", "ns": "1000000"},
                        "compute_infer": {"count": "10", "ns": "5000000"},
                        "compute_output": {"count": "10", "ns": "1000000"}},
    "batch_stats": [{"batch_size": "1", "compute_infer": {"count": "2", "ns": "2000000"}},
                    {"batch_size": "4", "compute_infer": {"count": "2", "ns": "6000000"}}]}]}
# ... and later, as the HTTP endpoint returns it (integers).
STATS_AFTER = {"model_stats": [{
    "name": "m", "version": "1", "inference_count": 42, "execution_count": 8,
    "inference_stats": {"success": {"count": 42, "ns": 266000000}, "fail": {"count": 1, "ns": 5},
                        "queue": {"count": 42, "ns": 34000000},
                        "compute_input": {"count": 42, "ns": 1000000 + 32000000},
                        "compute_infer": {"count": 42, "ns": 5000000 + 128000000},
                        "compute_output": {"count": 42, "ns": 1000000}},
    "batch_stats": [{"batch_size": 1, "compute_infer": {"count": 2, "ns": 2000000}},
                    {"batch_size": 4, "compute_infer": {"count": 2, "ns": 6000000}},
                    {"batch_size": 8, "compute_input": {"count": 4, "ns": 4000000},
                     "compute_infer": {"count": 4, "ns": 16000000}}]}]}

METRICS_TEXT = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="m",version="1"} 42
nv_inference_request_success{model="other",version="1"} 7
# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{model="m",reason="REJECTED",version="1"} 3
nv_inference_request_failure{model="m",reason="BACKEND",version="1"} 1
# HELP nv_inference_count Number of inferences performed
# TYPE nv_inference_count counter
nv_inference_count{model="m",version="1"} 42
# HELP nv_inference_exec_count Number of model executions performed
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{model="m",version="1"} 8
# HELP nv_inference_queue_duration_us Cumulative inference queuing duration in microseconds
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{model="m",version="1"} 4200
# HELP nv_inference_pending_request_count Instantaneous number of pending requests
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="m",version="1"} 5
"""


# --------------------------------------------------------------------------- schedules


def test_poisson_is_seeded_and_has_the_rate() -> None:
    a = poisson_arrivals(500.0, n=20000, seed=3)
    assert np.array_equal(a, poisson_arrivals(500.0, n=20000, seed=3))
    assert not np.array_equal(a, poisson_arrivals(500.0, n=20000, seed=4))
    assert np.all(np.diff(a) >= 0) and a[0] > 0
    assert len(a) / a[-1] == pytest.approx(500.0, rel=0.03)
    gaps = np.diff(a)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # exponential: CV = 1


def test_poisson_by_duration_and_both_bounds() -> None:
    a = poisson_arrivals(1000.0, duration=2.0, seed=1)
    assert a.max() < 2.0 and len(a) == pytest.approx(2000, rel=0.1)
    assert len(poisson_arrivals(1000.0, n=50, duration=2.0, seed=1)) == 50
    assert poisson_arrivals(10.0, n=1000, duration=1.0, seed=1).max() < 1.0


@pytest.mark.parametrize("kwargs, match", [
    ({"rate": 0, "n": 5}, "rate"), ({"rate": -1, "n": 5}, "rate"), ({"rate": float("nan"), "n": 5}, "rate"),
    ({"rate": 10}, "bound"), ({"rate": 10, "n": -1}, "n must"),
])
def test_poisson_bad_input(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        poisson_arrivals(**kwargs)


def test_capped_exponential() -> None:
    x = capped_exponential(20, 64).sample(5000, 0)
    assert x.min() >= 1 and x.max() == 64 and x.dtype.kind == "i"
    assert 15 < x.mean() < 22
    assert np.array_equal(x, capped_exponential(20, 64).sample(5000, 0))
    with pytest.raises(ValueError, match="cap"):
        capped_exponential(20, 0)


def test_request_sources() -> None:
    a = RequestSpec({"X": np.zeros((1, 2), np.float32)})
    b = RequestSpec({"X": np.ones((1, 2), np.float32)})
    assert as_factory(a)(7) is a
    f = as_factory([a, b])
    assert f(0) is a and f(3) is b
    assert as_factory(lambda i: b)(0) is b
    with pytest.raises(ValueError, match="empty"):
        as_factory([])
    with pytest.raises(ValueError, match="RequestSpec"):
        as_factory(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="numpy array"):
        RequestSpec({"X": [1, 2]})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="at least one input"):
        RequestSpec({})
    SequenceSpec(step=lambda k, prev: None, sequence_id=0)


# --------------------------------------------------------------------------- records and report


def _records() -> Records:
    rs = [RequestRecord(index=i, sent=0.1 * i, first=0.1 * i + 0.010, last=0.1 * i + 0.010, tokens=1, responses=1)
          for i in range(99)]
    rs.append(RequestRecord(index=99, sent=9.9, last=9.91, error="[StatusCode.UNAVAILABLE] [request id: 99] "
                                                                  "Exceeds maximum queue size"))
    return Records.from_list(reversed(rs))


def test_records_columns_and_errors() -> None:
    r = _records()
    assert len(r) == 100 and list(r.index[:3]) == [0, 1, 2]
    assert r.ok.sum() == 99 and r.rejected.sum() == 1
    assert np.nanmean(r.latency) == pytest.approx(0.010)
    assert math.isnan(r.latency[-1])
    assert r.errors() == {"[StatusCode.UNAVAILABLE] [request id: N] Exceeds maximum queue size": 1}
    assert is_rejection("[StatusCode.UNAVAILABLE] Request timeout expired")
    assert not is_rejection("[StatusCode.INVALID_ARGUMENT] input TOKENS is missing") and not is_rejection(None)


def test_stream_token_figures() -> None:
    rs = [RequestRecord(index=0, sent=0.0, first=0.05, last=0.05 + 9 * 0.01, tokens=10, responses=10,
                        token_times=[0.05 + k * 0.01 for k in range(10)])]
    r = Records.from_list(rs)
    assert r.ttft[0] == pytest.approx(0.05) and r.tpot[0] == pytest.approx(0.01)
    assert np.allclose(r.inter_token(), 0.01)


def test_report_summary_split_and_json() -> None:
    stats = ModelStats.from_json(STATS_AFTER, "m") - ModelStats.from_json(STATS_BEFORE, "m")
    rep = LoadReport(model="m", mode="closed", protocol="grpc", records=_records(), wall_s=9.91,
                     client_cpu_s=0.05, concurrency=4, server=stats)
    s = rep.summary()
    json.dumps(s, allow_nan=False)  # strictly JSON: no NaN
    assert s["requests"] == 100 and s["ok"] == 99 and s["rejected"] == 1
    assert s["throughput_rps"] == pytest.approx(99 / 9.91, rel=1e-3)
    assert s["latency_ms"]["p50"] == pytest.approx(10.0)
    assert s["server"]["mean_batch_size"] == pytest.approx(32 / 4)
    split = rep.split_ms()
    assert split["queue"] == pytest.approx(1.0) and split["compute"] == pytest.approx(5.0)
    assert split["server_other"] == pytest.approx(8.0 - 1.0 - 5.0)
    assert split["overhead"] == pytest.approx(10.0 - 8.0)
    assert sum(split[k] for k in ("queue", "compute", "server_other", "overhead")) == pytest.approx(split["total"])
    assert rep.batch_histogram() == {8: 4}
    assert "send_lateness_ms" not in s and "tokens" not in s


# --------------------------------------------------------------------------- statistics extension


def test_stats_parse_and_difference() -> None:
    before = ModelStats.from_json(STATS_BEFORE, "m")
    after = ModelStats.from_json(STATS_AFTER, "m")
    assert before.inference_count == 10 and before.mean_batch_size == 2.5
    d = after - before
    assert (d.inference_count, d.execution_count, d.success, d.failed) == (32, 4, 32, 1)
    assert d.mean_batch_size == 8.0
    assert d.batch_histogram() == {8: 4}  # unchanged sizes drop out
    assert d.batch_service_ms() == {8: 5.0}
    assert d.mean_ms("queue") == pytest.approx(1.0) and d.mean_ms("compute_infer") == pytest.approx(4.0)
    assert d.mean_ms("success") == pytest.approx(8.0)
    with pytest.raises(ValueError, match="unknown phase"):
        d.mean_ms("bogus")
    with pytest.raises(ValueError, match="no entry"):
        ModelStats.from_json(STATS_AFTER, "nope")
    with pytest.raises(ValueError, match="cannot difference"):
        after - ModelStats(model="x")


# --------------------------------------------------------------------------- Prometheus


def test_metrics_parse_by_name_label_and_difference() -> None:
    m1 = MetricsSnapshot.parse(METRICS_TEXT)
    assert m1.get("nv_inference_request_success", model="m") == 42
    assert m1.get("nv_inference_request_success") == 49  # summed over models
    assert m1.by_label("nv_inference_request_failure", "reason", model="m") == {"REJECTED": 3, "BACKEND": 1}
    assert m1.types["nv_inference_count"] == "counter"
    m0 = MetricsSnapshot.parse(METRICS_TEXT.replace("} 42", "} 40").replace("} 8\n", "} 6\n"))
    d = (m1 - m0).model_summary("m")
    assert d["inference_count"] == 2 and d["exec_count"] == 2 and d["mean_batch_size"] == 1.0
    assert d["pending_request_count"] == 5  # a gauge keeps its latest value
    assert m1.get("nope", default=-1.0) == -1.0


# --------------------------------------------------------------------------- plots


def _scrape(success: float, count: float, execs: float, queue_us: float, pending: float) -> MetricsSnapshot:
    text = f"""# HELP nv_inference_request_success ok
# TYPE nv_inference_request_success counter
nv_inference_request_success{{model="m",version="1"}} {success}
# HELP nv_inference_count inferences
# TYPE nv_inference_count counter
nv_inference_count{{model="m",version="1"}} {count}
# HELP nv_inference_exec_count executions
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{{model="m",version="1"}} {execs}
# HELP nv_inference_queue_duration_us queue
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{{model="m",version="1"}} {queue_us}
# HELP nv_inference_pending_request_count pending
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{{model="m",version="1"}} {pending}
"""
    return MetricsSnapshot.parse(text)


def test_timeline_rows_difference_counters() -> None:
    snaps = [(0.0, _scrape(0, 0, 0, 0, 0)), (0.5, _scrape(100, 100, 25, 50_000, 7)), (1.0, _scrape(100, 100, 25, 50_000, 0))]
    rows = timeline_rows(snaps, "m")
    assert rows[0] == {"t": 0.5, "rps": 200.0, "queue_ms": 0.5, "mean_batch": 4.0, "pending": 7.0, "exec_per_s": 50.0}
    assert rows[1]["rps"] == 0 and rows[1]["queue_ms"] != rows[1]["queue_ms"]  # NaN when idle
    with pytest.raises(ValueError):
        MetricsTimeline("127.0.0.1:1", interval=0)
    tl = MetricsTimeline("127.0.0.1:1", snapshots=snaps)
    s = tl.series("m", "nv_inference_pending_request_count", "nv_inference_request_success")
    assert s.tolist() == [[0.0, 0.0, 0.0], [0.5, 7.0, 100.0], [1.0, 0.0, 100.0]]
    assert tl.rows("m") == rows and MetricsTimeline("x").series("m", "a").shape == (0, 2)


def test_timeline_rows_merge_counters_caught_out_of_step() -> None:
    """Triton counts a batch's inferences just before its execution; a scrape in between once gave a
    0.15-s window 7 inferences / 8 executions (mean batch 0.875). Such windows are merged."""
    cum = [(0.0, 0, 0, 0), (0.15, 9, 8, 1), (0.30, 16, 16, 0), (0.45, 16, 16, 0), (0.60, 20, 18, 0),
           (0.75, 22, 18, 2), (0.90, 24, 20, 0)]  # t, inferences (= successes), executions, pending
    rows = timeline_rows([(t, _scrape(n, n, e, 100 * n, p)) for t, n, e, p in cum], "m")
    assert [r["t"] for r in rows] == [0.30, 0.45, 0.60, 0.90]
    np.testing.assert_allclose([r["mean_batch"] for r in rows], [1.0, np.nan, 2.0, 2.0])
    np.testing.assert_allclose([r["rps"] for r in rows], [16 / 0.30, 0.0, 4 / 0.15, 4 / 0.30])
    # a first window that starts on a half-counted batch has nothing to merge into; an unsettled last one
    cum = [(0.0, 5, 4), (0.2, 5, 5), (0.4, 7, 7), (0.6, 9, 7)]
    rows = timeline_rows([(t, _scrape(n, n, e, 0, 0)) for t, n, e in cum], "m")
    assert [(r["t"], r["mean_batch"]) for r in rows] == [(0.4, 1.0)]

    # Random batches, scraped at random moments (also between a batch's two counts): every window's
    # mean is >= 1 and the windows together hold every request.
    rng = np.random.default_rng(0)
    n = e = 0
    snaps = [(0.0, _scrape(0, 0, 0, 0, 0))]
    for size in rng.integers(1, 4, size=300):
        n += size
        if rng.random() < 0.3:
            snaps.append((len(snaps) * 0.1, _scrape(n, n, e, 0, 0)))
        e += 1
        if rng.random() < 0.3:
            snaps.append((len(snaps) * 0.1, _scrape(n, n, e, 0, 0)))
    snaps.append((len(snaps) * 0.1, _scrape(n, n, e, 0, 0)))
    rows = timeline_rows(snaps, "m")
    assert np.nanmin([r["mean_batch"] for r in rows]) >= 1
    dts = np.diff([0.0] + [r["t"] for r in rows])
    assert sum(r["rps"] * dt for r, dt in zip(rows, dts)) == pytest.approx(n)


def test_pool_reports_lays_runs_end_to_end() -> None:
    from batchlab.load import pool_reports

    s1 = ModelStats.from_json(STATS_BEFORE, "m")
    s2 = ModelStats.from_json(STATS_AFTER, "m")
    a = LoadReport(model="m", mode="closed", protocol="grpc", records=_records(), wall_s=10.0, client_cpu_s=1.0,
                   concurrency=4, server=s1)
    b = LoadReport(model="m", mode="closed", protocol="grpc", records=_records(), wall_s=5.0, client_cpu_s=0.5,
                   concurrency=4, server=s2)
    p = pool_reports([a, b], label="both")
    assert p.n == 200 and sorted(p.records.index) == list(range(200))
    assert p.wall_s == 15.0 and p.client_cpu_s == 1.5 and p.label == "both"
    assert p.throughput_rps == pytest.approx(198 / 15.0)
    assert p.records.sent[100] == pytest.approx(10.0)  # the second run starts after the first
    assert p.server.inference_count == 52 and p.server.batch_histogram() == {1: 4, 4: 4, 8: 4}
    with pytest.raises(ValueError, match="same model"):
        pool_reports([a, LoadReport(model="x", mode="closed", protocol="grpc", records=_records(), wall_s=1,
                                    client_cpu_s=0)])


# --------------------------------------------------------------------------- the rate actually offered


class _SlowSender:
    """A transport whose client spends `cost_s` of blocking CPU on every send (serialising a big
    request, say): it cannot send faster than 1 / cost_s requests per second."""

    protocol = "fake"
    saw_sequences = False

    def __init__(self, cost_s: float) -> None:
        self.cost_s = cost_s

    async def open(self) -> "_SlowSender":
        return self

    async def close(self) -> None:
        return None

    async def execute(self, spec, rec: RequestRecord) -> None:
        rec.sent = time.perf_counter()
        time.sleep(self.cost_s)           # blocks the event loop, as real client work does
        rec.first = rec.last = time.perf_counter()
        rec.tokens = rec.responses = 1


def _open_report(cost_s: float, arrivals: np.ndarray, rate: float | None) -> LoadReport:
    records: list[RequestRecord] = []
    t0 = time.perf_counter()
    asyncio.run(drive_open(_SlowSender(cost_s), lambda i: None, arrivals, records, t0))
    recs = Records.from_list(records)
    for arr in (recs.sent, recs.first, recs.last):
        arr -= t0
    return LoadReport(model="m", mode="open", protocol="fake", records=recs, wall_s=float(recs.last.max()),
                      client_cpu_s=0.0, offered_rate=rate)


def test_a_client_that_cannot_keep_up_says_so() -> None:
    """1000 req/s asked of a client that needs 4 ms per send: it offers ~250 req/s, and says so."""
    arrivals = np.arange(100) / 1000.0
    rep = _open_report(0.004, arrivals, rate=1000.0)
    assert rep.scheduled_rate_rps() == pytest.approx(1000.0, rel=0.02)
    assert rep.sent_rate_rps() < 260, rep.sent_rate_rps()    # >= 4 ms a send: at most 250/s, however busy
    assert rep.rate_shortfall() == pytest.approx(1 - rep.sent_rate_rps() / rep.scheduled_rate_rps())
    assert rep.rate_shortfall() > 0.7 and rep.client_fell_behind() is True
    assert rep.client_kept_up() is False                         # the lateness says the same
    note = rep.rate_note()
    pct = round(100 * rep.rate_shortfall())
    assert note.startswith(f"注意：实际发出速率 {rep.sent_rate_rps():.0f} 请求/秒，比要求的 1000 请求/秒低 {pct}%")
    assert "客户端跟不上，这不是 1000 请求/秒下的测量" in note and "最晚" in note
    s = rep.summary()
    json.dumps(s, allow_nan=False)
    assert s["note"] == note and s["client_fell_behind"] is True
    assert s["sent_rate_rps"] == pytest.approx(rep.sent_rate_rps(), abs=1e-3)
    assert s["scheduled_rate_rps"] == pytest.approx(rep.scheduled_rate_rps(), abs=1e-3)
    assert rep.describe().splitlines()[0] == note and str(rep) == rep.describe()
    assert "开环负载：要求 1000 请求/秒，实际发出" in rep.describe()
    assert "CLIENT FELL BEHIND" in repr(rep) and s["requested_rate_rps"] == 1000.0


def test_a_client_that_keeps_up_adds_no_note() -> None:
    arrivals = np.arange(200) / 100.0       # 2 s: a stall of the shared machine is small against it
    rep = _open_report(0.0, arrivals, rate=100.0)
    assert rep.sent_rate_rps() == pytest.approx(100.0, rel=0.05)
    assert abs(rep.rate_shortfall()) < 0.05 and rep.client_fell_behind() is False
    assert rep.rate_note() is None and "note" not in rep.summary()
    assert "注意" not in rep.describe() and "FELL BEHIND" not in repr(rep)


def test_poisson_schedule_is_compared_with_itself_not_with_lambda() -> None:
    """20 Poisson arrivals at λ = 50/s have their own rate (here 65/s): a client that sent every
    request on time did not fall behind; one that sent 20 % slow is judged against the 65/s."""
    arrivals = poisson_arrivals(50.0, n=20, seed=5)
    sched = np.array(arrivals)
    recs = Records.from_list([RequestRecord(index=i, sent=t + 0.0003, scheduled=t, first=t + 0.002, last=t + 0.002,
                                            tokens=1, responses=1) for i, t in enumerate(sched)])
    rep = LoadReport(model="m", mode="open", protocol="grpc", records=recs, wall_s=1.0, client_cpu_s=0.0,
                     offered_rate=50.0)
    assert rep.scheduled_rate_rps() == pytest.approx(65.16, abs=0.01)  # chance, not the client
    assert rep.client_fell_behind() is False and rep.rate_note() is None
    late = Records.from_list([RequestRecord(index=i, sent=t * 1.2, scheduled=t, first=t * 1.2, last=t * 1.2,
                                            tokens=1, responses=1) for i, t in enumerate(sched)])
    rep = LoadReport(model="m", mode="open", protocol="grpc", records=late, wall_s=1.0, client_cpu_s=0.0,
                     offered_rate=50.0)
    assert rep.rate_shortfall() == pytest.approx(1 - 1 / 1.2)
    sent = rep.sent_rate_rps()
    assert rep.rate_note().startswith(f"注意：实际发出速率 {sent:.1f} 请求/秒，比要求的 65.2 请求/秒"
                                      "（这份泊松时间表本身的速率；设定的 λ = 50.0）低 17%——客户端跟不上，"
                                      "这不是 50.0 请求/秒下的测量")


def test_closed_loop_and_tiny_lags_are_not_judged() -> None:
    closed = LoadReport(model="m", mode="closed", protocol="grpc", records=_records(), wall_s=9.91,
                        client_cpu_s=0.0, concurrency=4)
    assert closed.client_fell_behind() is None and closed.rate_note() is None
    assert closed.sent_rate_rps() == pytest.approx(99 / 9.9)
    assert "scheduled_rate_rps" not in closed.summary() and "note" not in closed.summary()
    # a burst of 4 within 0.9 ms sent over 1.8 ms: 50 % "slower", but 0.9 ms is jitter, not a slow client
    recs = Records.from_list([RequestRecord(index=i, sent=0.001 + i * 0.0006, scheduled=i * 0.0003,
                                            first=0.01, last=0.01, tokens=1, responses=1) for i in range(4)])
    burst = LoadReport(model="m", mode="open", protocol="grpc", records=recs, wall_s=0.01, client_cpu_s=0.0)
    assert burst.rate_shortfall() == pytest.approx(0.5) and burst.client_fell_behind() is False


def test_run_open_loop_warns_when_the_client_falls_behind(monkeypatch) -> None:
    """The whole run_open_loop path (a fake server and transport): the warning carries the note."""
    monkeypatch.setattr(runner, "check_model_ready", lambda *a, **k: None)
    monkeypatch.setattr(runner, "make_transport", lambda *a, **k: _SlowSender(0.004))
    server = ExternalServer(http_url="127.0.0.1:1", grpc_url="127.0.0.1:2")
    spec = RequestSpec({"X": np.ones((1, 1), np.float32)})
    with pytest.warns(ClientFellBehind, match=r"注意：实际发出速率 .* 请求/秒，比要求的 .*客户端跟不上") as got:
        rep = run_open_loop(server, "m", spec, rate=800.0, n_requests=60, stats=False, progress=False)
    assert str(got[0].message) == rep.rate_note() and got[0].filename == __file__
    assert rep.client_fell_behind() and rep.offered_rate == 800.0
    monkeypatch.setattr(runner, "make_transport", lambda *a, **k: _SlowSender(0.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ClientFellBehind)
        rep = run_open_loop(server, "m", spec, rate=100.0, n_requests=200, stats=False, progress=False)
    assert rep.client_fell_behind() is False


def test_settle_waits_until_the_counts_stop_moving() -> None:
    # the success count is already complete, but the last iterations are counted a moment later
    reads = iter([(5, 40, 30, 0), (5, 47, 33, 0), (5, 48, 34, 0), (5, 48, 34, 0), (5, 99, 99, 0)])

    def read() -> ModelStats:
        ok, inf, ex, _ = next(reads)
        return ModelStats(model="m", inference_count=inf, execution_count=ex, phases={"success": (ok, ok * 1000)})
    after = settle(read, ModelStats(model="m"), 5, poll=0.0)
    assert (after.inference_count, after.execution_count) == (48, 34)


def test_settle_waits_for_the_batch_statistics_too() -> None:
    # requests and counters are complete and steady, but batch_stats counts the 2nd execution later
    def stats(executions: int) -> ModelStats:
        return ModelStats(model="m", inference_count=2, execution_count=2, phases={"success": (2, 2000)},
                          batches={1: {"compute_infer": (executions, executions * 1000)}})
    reads = iter([stats(1), stats(1), stats(1), stats(2), stats(2), stats(9)])
    after = settle(lambda: next(reads), ModelStats(model="m"), 2, executions=2, poll=0.0)
    assert after.batch_executions == 2
    # nothing settles: the last read comes back once the timeout has passed
    moving = iter(range(10**6))
    last = settle(lambda: ModelStats(model="m", inference_count=next(moving)), ModelStats(model="m"), 0,
                  timeout=0.05, poll=0.001)
    assert last.inference_count > 1
