"""The source article's "Python 演示", restored to runnable form and unchanged in behaviour.

The article printed this code with its line breaks lost. ``Request``, ``Batcher``, ``run_sim``
and ``main`` below are that code with the line breaks put back (97 lines in the article's
layout, as its header says); only comments and docstrings are translated into English or
added, and type hints added. ``random.seed(42)``, the 0.05 s tick and every statement are as printed, and
``tests/test_sim_seed_demo.py`` checks the results against the verbatim restoration. ``main()``
prints what the article's ``__main__`` block prints::

    === 批处理模拟结果 ===
    动态批 batch=4 delay=3.0 朴素模式 => (28, 6.692857142857145)
    动态批 batch=4 delay=3.0 序列模式 => (28, 5.635714285714291)
    动态批 batch=2 delay=1.0 序列模式 => (22, 12.29090909090917)

`trace_sim` re-runs the same loop with an instrumented ``Batcher`` so the defects listed in
`DEFECTS` can be shown; each is verified by a test. The course's event-driven replacement is
the rest of `batchlab.sim`.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field


class Request:
    """One simulated inference request."""

    def __init__(self, rid: int, length: float, arrive_time: float) -> None:
        self.rid = rid
        self.length = length          # sequence length (tokens)
        self.arrive_time = arrive_time
        self.finish_time = None

    def latency(self) -> float:
        """Finish time minus arrival time."""
        return self.finish_time - self.arrive_time


class Batcher:
    """Dynamic batcher: fires when max_batch_size is reached or max_delay has passed."""

    def __init__(self, max_batch_size: int, max_delay: float, seq_mode: bool = True) -> None:
        self.max_batch_size = max_batch_size
        self.max_delay = max_delay
        self.seq_mode = seq_mode
        self.queue = deque()          # requests waiting to be batched
        self.active = []              # the batch being computed
        self.finished = []
        self.clock = 0.0
        self.remain = 0.0             # time left for the naive batch

    def submit(self, req: Request) -> None:
        """Append a request to the queue."""
        self.queue.append(req)

    def tick(self, dt: float) -> None:
        """Advance the clock by ``dt``, progress the active batch, then try to form a batch."""
        self.clock += dt
        # sequence batching: each request advances on its own, short ones finish first
        if self.seq_mode:
            for r in self.active:
                r.length -= dt * 10
                if r.length <= 0:
                    r.finish_time = self.clock
                    self.finished.append(r)
            self.active = [r for r in self.active if r.length > 0]
        else:
            # naive batching: the whole batch advances at the pace of its longest member
            if self.active:
                self.remain -= dt
                if self.remain <= 0:
                    for r in self.active:
                        r.finish_time = self.clock
                        self.finished.append(r)
                    self.active = []
        # try to form a batch: take at most max_batch_size from the queue
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
                # neither full nor timed out: put them back and wait
                for r in batch:
                    self.queue.append(r)


def run_sim(batch_size: int, delay: float, seq_mode: bool, duration: float = 40.0) -> tuple:
    """Run the demo: returns (finished requests, their mean latency in seconds)."""
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


def main() -> None:
    """Print exactly what the article's ``if __name__ == "__main__":`` block prints."""
    print("=== 批处理模拟结果 ===")
    print("动态批 batch=4 delay=3.0 朴素模式 =>", run_sim(4, 3.0, False))
    print("动态批 batch=4 delay=3.0 序列模式 =>", run_sim(4, 3.0, True))
    print("动态批 batch=2 delay=1.0 序列模式 =>", run_sim(2, 1.0, True))


# ---------------------------------------------------------------------------------------------
# Instrumentation (not in the article): the same loop, watched from outside.


@dataclass
class Trace:
    """What one `trace_sim` run did, tick by tick."""

    result: tuple                       # what run_sim returns: (finished count, mean latency)
    ticks: int                          # tick() calls made
    clock: float                        # final clock
    arrivals: list[tuple[int, float, int]] = field(default_factory=list)        # (rid, time, length)
    admissions: list[tuple[int, list[int], int]] = field(default_factory=list)  # (tick, rids, active before)
    finishes: dict[int, float] = field(default_factory=dict)                    # rid -> finish time
    empty_slot_ticks: int = 0           # ticks with a free slot in a running batch while requests waited
    left_over: int = 0                  # submitted but never finished (queued or running at the end)


class _TracingBatcher(Batcher):
    """`Batcher` that records admissions and free slots without changing what it does."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trace_ticks = 0
        self.trace_admissions: list[tuple[int, list[int], int]] = []
        self.trace_empty_slot_ticks = 0

    def tick(self, dt: float) -> None:
        before = list(self.active)
        super().tick(dt)
        self.trace_ticks += 1
        new = [r for r in self.active if r not in before]
        if new:
            still = [r for r in before if r.finish_time is None]
            self.trace_admissions.append((self.trace_ticks, [r.rid for r in self.active], len(still)))
        if self.active and self.queue and len(self.active) < self.max_batch_size:
            self.trace_empty_slot_ticks += 1


def trace_sim(batch_size: int, delay: float, seq_mode: bool, duration: float = 40.0) -> Trace:
    """Run `run_sim`'s loop (same seed, tick and draws) with an instrumented batcher."""
    b = _TracingBatcher(batch_size, delay, seq_mode)
    next_t = 0.0
    rid = 0
    dt = 0.05
    random.seed(42)
    arrivals = []
    while b.clock < duration:
        if b.clock >= next_t:
            length = random.randint(5, 50)
            b.submit(Request(rid, length, b.clock))
            arrivals.append((rid, b.clock, length))
            rid += 1
            next_t = b.clock + random.expovariate(1 / 1.5)
        b.tick(dt)
    if b.finished:
        lat = [r.latency() for r in b.finished]
        result = (len(b.finished), sum(lat) / len(lat))
    else:
        result = (0, 0)
    return Trace(result, b.trace_ticks, b.clock, arrivals, b.trace_admissions,
                 {r.rid: r.finish_time for r in b.finished}, b.trace_empty_slot_ticks,
                 rid - len(b.finished))


@dataclass(frozen=True)
class Defect:
    """One thing the article's demo gets wrong, with the test that shows it."""

    key: str
    claim: str
    test: str


DEFECTS: tuple[Defect, ...] = (
    Defect(
        "no_join_while_active",
        "Its 'sequence mode' never admits a request while others are active: a batch is formed "
        "only under `if not self.active:`. Short requests leave early, but their slots stay empty "
        "while requests wait, until the longest member is done. That is request-level batching "
        "with early responses, not continuous batching.",
        "test_defect_no_join_while_active",
    ),
    Defect(
        "same_batches_both_modes",
        "So the 'naive' and 'sequence' modes run the same batches: in the 40 s runs (batch=4, "
        "delay=3.0) every batch has the same members, start ticks differ by at most 3 ticks (float "
        "residue, see below), and both finish 28 requests. The sequence mode only returns short "
        "members earlier; it adds no throughput.",
        "test_defect_same_batches_both_modes",
    ),
    Defect(
        "one_arrival_per_tick",
        "At most one request arrives per tick, and every gap is rounded up to whole ticks "
        "(next_t is set from the tick clock, and a request is submitted only at a tick with "
        "clock >= next_t): the 1.5 s mean gap becomes about 1.5 + dt/2 s, and no rate above "
        "1/dt = 20 requests/s can be expressed.",
        "test_defect_one_arrival_per_tick",
    ),
    Defect(
        "batch2_overloaded",
        "Its batch=2 case is overloaded: a batch of 2 holds the server for max(L1, L2)/10 s "
        "(3.5 s on average for lengths uniform on 5..50), so it serves about 0.57 requests/s "
        "while about 0.66 arrive (rho ~ 1.16). The queue grows without bound and the mean "
        "latency depends on how long you run: 12.3 s at 40 s, 27 s at 400 s, 270 s at 4000 s. "
        "A 40 s run of an unstable queue says little.",
        "test_defect_batch2_overloaded",
    ),
    Defect(
        "unfinished_left_out",
        "Requests still queued or running when the clock stops are silently left out of the "
        "mean latency: in the batch=2 run 29 requests arrive and only 22 are counted. Run on "
        "(same seed, same first 40 s), the 7 left out take 17.55 to 23.0 s each, all above the "
        "reported mean of 12.3 s; the mean over all 29 is 13.9 s. The mean is biased low "
        "exactly when the load is too high.",
        "test_defect_unfinished_left_out",
    ),
    Defect(
        "batching_is_free",
        "An execution's duration does not depend on how many requests it holds: a batch of 4 "
        "takes as long as its longest member alone. Batching costs nothing in this model, so "
        "it cannot show the trade-off the article's own t_batch stands for.",
        "test_defect_batching_is_free",
    ),
    Defect(
        "float_tick_clock",
        "Time is a float sum of 0.05 s ticks: a 40 s run makes 801 ticks (after 800 the clock "
        "reads 39.99999999999986 < 40), and the naive mode's `remain -= dt` leaves residues "
        "such as 4.7 - 94 x 0.05 = 8.5e-15 > 0 that cost an extra tick. Every time is quantised "
        "to the tick; an event-driven simulator has neither problem.",
        "test_defect_float_tick_clock",
    ),
)


if __name__ == "__main__":
    main()
