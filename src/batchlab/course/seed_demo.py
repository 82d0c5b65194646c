"""The source article's "Python 演示", restored to runnable form and unchanged in behaviour.

``Request``, ``Batcher``, ``run_sim`` and ``main`` are the article's code with its lost line
breaks put back; only comments, docstrings and type hints were added, every statement (and
``random.seed(42)``, the 0.05 s tick) is as printed (tests/test_sim_seed_demo.py checks it).
`trace_sim` re-runs the loop with an instrumented ``Batcher`` to show the `DEFECTS`.
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
    lat = [r.latency() for r in b.finished]
    return Trace((len(lat), sum(lat) / len(lat)) if lat else (0, 0), b.trace_ticks, b.clock, arrivals,
                 b.trace_admissions, {r.rid: r.finish_time for r in b.finished}, b.trace_empty_slot_ticks,
                 rid - len(b.finished))


@dataclass(frozen=True)
class Defect:
    """One thing the article's demo gets wrong; `test` (in tests/test_sim_seed_demo.py) shows it."""

    key: str
    claim: str

    @property
    def test(self) -> str:
        """The name of the test that demonstrates it."""
        return f"test_defect_{self.key}"


DEFECTS: tuple[Defect, ...] = (
    Defect("no_join_while_active", "'Sequence mode' forms a batch only when none is active: slots "
           "freed early stay empty while requests wait (early responses, not continuous batching)."),
    Defect("same_batches_both_modes", "So both modes run the same batches and finish the same "
           "requests; the sequence mode only returns short members earlier."),
    Defect("one_arrival_per_tick", "At most one request arrives per tick and every gap is rounded "
           "up to whole ticks: no rate above 1/dt can be expressed."),
    Defect("batch2_overloaded", "Its batch=2 case is overloaded (rho > 1): the mean latency grows "
           "with the run length, so a 40 s run of it says little."),
    Defect("unfinished_left_out", "Requests still queued or running at the end are left out of "
           "the mean latency, which is biased low exactly when the load is too high."),
    Defect("batching_is_free", "An execution takes as long as its longest member whatever the "
           "batch size: batching costs nothing, so there is no trade-off to show."),
    Defect("float_tick_clock", "Time is a float sum of 0.05 s ticks: residues cost extra ticks "
           "and every time is quantised to the tick."),
)


if __name__ == "__main__":
    main()
