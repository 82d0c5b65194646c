"""batchlab.course.seed_demo: the article's demo restored unchanged in behaviour, and each DEFECT shown.

ARTICLE_CODE is the article's "Python 演示" with only its line breaks and indentation put back
(comments and strings verbatim); it is executed here and compared with batchlab.course.seed_demo.
"""

import io
from contextlib import redirect_stdout
from itertools import product

import pytest

from batchlab.course import seed_demo as sd

ARTICLE_CODE = '''"""Triton 动态批处理与序列批处理模拟器"""
import random
from collections import deque


class Request:
    """模拟一个推理请求"""

    def __init__(self, rid, length, arrive_time):
        self.rid = rid
        self.length = length          # 序列长度(token 数)
        self.arrive_time = arrive_time
        self.finish_time = None

    def latency(self):
        return self.finish_time - self.arrive_time


class Batcher:
    """动态批处理器：攒满 max_batch_size 或超过 max_delay 触发"""

    def __init__(self, max_batch_size, max_delay, seq_mode=True):
        self.max_batch_size = max_batch_size
        self.max_delay = max_delay
        self.seq_mode = seq_mode
        self.queue = deque()          # 等待拼锅的请求
        self.active = []              # 正在计算的批次
        self.finished = []
        self.clock = 0.0
        self.remain = 0.0             # 朴素批处理剩余时间

    def submit(self, req):
        self.queue.append(req)

    def tick(self, dt):
        self.clock += dt
        # 序列批处理：每个请求独立推进，短序列先出锅
        if self.seq_mode:
            for r in self.active:
                r.length -= dt * 10
                if r.length <= 0:
                    r.finish_time = self.clock
                    self.finished.append(r)
            self.active = [r for r in self.active if r.length > 0]
        else:
            # 朴素批处理：以最长序列为准，整体推进
            if self.active:
                self.remain -= dt
                if self.remain <= 0:
                    for r in self.active:
                        r.finish_time = self.clock
                        self.finished.append(r)
                    self.active = []
        # 尝试凑批：从队列取出最多 max_batch_size 个
        if not self.active:
            batch = []
            while self.queue and len(batch) < self.max_batch_size:
                batch.append(self.queue.popleft())
            if not batch:
                return
            waited = max(self.clock - r.arrive_time for r in batch)
            if len(batch) >= self.max_batch_size or waited >= self.max_delay:
                self.active = batch
                if self.seq_mode:
                    for r in self.active:
                        r.length = max(r.length, 1)
                else:
                    self.remain = max(r.length for r in self.active) / 10
            else:
                # 没凑满也没超时，放回队列等待
                for r in batch:
                    self.queue.append(r)


def run_sim(batch_size, delay, seq_mode, duration=40.0):
    b = Batcher(batch_size, delay, seq_mode)
    next_t = 0.0
    rid = 0
    dt = 0.05
    random.seed(42)
    while b.clock < duration:
        if b.clock >= next_t:
            b.submit(Request(rid, random.randint(5, 50), b.clock))
            rid += 1
            next_t = b.clock + random.expovariate(1 / 1.5)
        b.tick(dt)
    if b.finished:
        lat = [r.latency() for r in b.finished]
        return len(b.finished), sum(lat) / len(lat)
    return 0, 0


if __name__ == "__main__":
    print("=== 批处理模拟结果 ===")
    print("动态批 batch=4 delay=3.0 朴素模式 =>", run_sim(4, 3.0, False))
    print("动态批 batch=4 delay=3.0 序列模式 =>", run_sim(4, 3.0, True))
    print("动态批 batch=2 delay=1.0 序列模式 =>", run_sim(2, 1.0, True))
'''


@pytest.fixture(scope="module")
def article():
    ns = {"__name__": "article_demo"}
    exec(compile(ARTICLE_CODE, "article_demo.py", "exec"), ns)
    return ns


def test_restoration_has_97_lines_like_the_article():
    assert len(ARTICLE_CODE.splitlines()) == 97


@pytest.mark.parametrize("args", [(4, 3.0, False), (4, 3.0, True), (2, 1.0, True)])
def test_same_results_as_the_article_code(article, args):
    assert sd.run_sim(*args) == article["run_sim"](*args)


def test_same_results_on_other_settings(article):
    for bs, delay, seq, dur in product((1, 3, 8), (0.0, 0.7), (False, True), (15.0, 120.0)):
        assert sd.run_sim(bs, delay, seq, dur) == article["run_sim"](bs, delay, seq, dur)


def test_main_prints_the_article_output(article):
    out = io.StringIO()
    with redirect_stdout(out):
        sd.main()
    lines = out.getvalue().splitlines()
    assert lines == [
        "=== 批处理模拟结果 ===",
        "动态批 batch=4 delay=3.0 朴素模式 => (28, 6.692857142857145)",
        "动态批 batch=4 delay=3.0 序列模式 => (28, 5.635714285714291)",
        "动态批 batch=2 delay=1.0 序列模式 => (22, 12.29090909090917)",
    ]


@pytest.mark.parametrize("args", [(4, 3.0, False), (4, 3.0, True), (2, 1.0, True), (3, 0.5, True)])
def test_trace_sim_is_the_same_run(args):
    assert sd.trace_sim(*args).result == sd.run_sim(*args)


def test_every_defect_has_its_test():
    names = set(globals())
    assert len(sd.DEFECTS) >= 6
    for d in sd.DEFECTS:
        assert d.test in names, d.key


# --- one test per entry of DEFECTS ------------------------------------------------------------


def test_defect_no_join_while_active():
    tr = sd.trace_sim(4, 3.0, True, duration=400.0)
    assert tr.admissions and all(active_before == 0 for _, _, active_before in tr.admissions)
    # slots stood empty in a running batch while requests waited
    assert tr.empty_slot_ticks > 100


def test_defect_same_batches_both_modes():
    naive, seq = sd.trace_sim(4, 3.0, False), sd.trace_sim(4, 3.0, True)
    assert [m for _, m, _ in naive.admissions] == [m for _, m, _ in seq.admissions]
    gaps = [a[0] - b[0] for a, b in zip(naive.admissions, seq.admissions)]
    assert 0 <= min(gaps) and max(gaps) == 3
    assert naive.result[0] == seq.result[0] == 28


def test_defect_one_arrival_per_tick():
    tr = sd.trace_sim(4, 3.0, True, duration=4000.0)
    times = [t for _, t, _ in tr.arrivals]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert min(gaps) >= 0.05 - 1e-9
    assert all(abs(g / 0.05 - round(g / 0.05)) < 1e-6 for g in gaps)  # whole ticks
    mean_gap = sum(gaps) / len(gaps)
    assert mean_gap == pytest.approx(1.5 + 0.05 / 2, abs=0.05)


def test_defect_batch2_overloaded():
    # a batch of 2 holds the server for max(L1, L2)/10 s, L uniform on 5..50
    values = range(5, 51)
    e_max = sum(max(x, y) for x in values for y in values) / len(values) ** 2
    assert e_max / 10 == pytest.approx(3.5, abs=0.05)
    capacity = 2 / (e_max / 10)
    tr = sd.trace_sim(2, 1.0, True, duration=4000.0)
    times = [t for _, t, _ in tr.arrivals]
    arrival_rate = (len(times) - 1) / (times[-1] - times[0])
    assert capacity == pytest.approx(0.57, abs=0.01) and arrival_rate == pytest.approx(0.66, abs=0.02)
    assert arrival_rate / capacity > 1.1
    lat = {d: sd.run_sim(2, 1.0, True, d)[1] for d in (40.0, 400.0, 4000.0)}
    assert lat[40.0] == pytest.approx(12.3, abs=0.05)
    assert lat[400.0] == pytest.approx(27.4, abs=0.05)
    assert lat[4000.0] == pytest.approx(270, abs=1)


def test_defect_unfinished_left_out():
    tr = sd.trace_sim(2, 1.0, True)
    assert len(tr.arrivals) == 29 and tr.result[0] == 22 and tr.left_over == 7
    assert tr.result[1] == pytest.approx(12.3, abs=0.01)
    longer = sd.trace_sim(2, 1.0, True, duration=120.0)  # the same run, continued
    arrival = {rid: t for rid, t, _ in longer.arrivals}
    assert all(longer.finishes[r] == f for r, f in tr.finishes.items())  # same first 40 s
    left = [r for r in range(29) if r not in tr.finishes]
    left_lat = [longer.finishes[r] - arrival[r] for r in left]
    assert min(left_lat) == pytest.approx(17.55, abs=0.01) and max(left_lat) == pytest.approx(23.0, abs=0.01)
    assert min(left_lat) > tr.result[1]
    assert sum(longer.finishes[r] - arrival[r] for r in range(29)) / 29 == pytest.approx(13.9, abs=0.05)


def test_defect_batching_is_free():
    def ticks_to_finish(lengths):
        b = sd.Batcher(len(lengths), 0.0, seq_mode=False)
        for i, length in enumerate(lengths):
            b.submit(sd.Request(i, length, 0.0))
        n = 0
        while len(b.finished) < len(lengths):
            b.tick(0.05)
            n += 1
        return n

    assert ticks_to_finish([30]) == ticks_to_finish([30, 30, 30, 30]) == ticks_to_finish([30, 5, 12, 29])


def test_defect_float_tick_clock():
    tr = sd.trace_sim(4, 3.0, True)
    assert tr.ticks == 801 and tr.clock > 40.0
    clock = 0.0
    for _ in range(800):
        clock += 0.05
    assert clock < 40.0 and clock == pytest.approx(39.99999999999986, abs=1e-12)
    remain = 4.7
    for _ in range(94):
        remain -= 0.05
    assert remain > 0 and remain == pytest.approx(8.5e-15, rel=0.01)


def _naive_extra_ticks(n: int, dt: float = 0.05) -> int:
    """Ticks the naive mode's `remain -= dt` spends on a batch whose longest member has `n` tokens
    beyond the exact `n / 10 / dt` the sequence mode's `length -= dt * 10` spends: 0, or 1 when the
    float residual of repeated subtraction stays above zero (defect 7)."""
    remain, k = n / 10, 0
    while remain > 0:
        remain -= dt
        k += 1
    return k - round(n / 10 / dt)


def test_naive_extra_ticks_explain_the_admission_offsets():
    extra = {n: _naive_extra_ticks(n) for n in range(5, 51)}
    assert set(extra.values()) == {0, 1} and extra[47] == 1
    naive, seq = sd.trace_sim(4, 3.0, False), sd.trace_sim(4, 3.0, True)
    length = {rid: n for rid, _, n in naive.arrivals}
    off = [a[0] - b[0] for a, b in zip(naive.admissions, seq.admissions)]
    ext = [_naive_extra_ticks(max(length[r] for r in m)) for _, m, _ in naive.admissions]
    assert off[0] == 0 and all(off[i] - off[i - 1] <= ext[i - 1] for i in range(1, len(off)))
