"""An independent SimPy model of Triton's dynamic batcher (test-only; shares no code with batchlab.sim).

Processes: a source that puts requests into a FIFO list, ``instances`` tokens in a store (an idle
model instance), and a batcher that takes an idle instance, then applies the rule of Triton's
``GetDynamicBatch`` to the pending requests, waiting on "a request arrived" or on the oldest
request's delay deadline, and hands each batch to an executor process that holds the instance for
base_us + per_item_us * b microseconds.
"""

from __future__ import annotations

import numpy as np
import simpy


def simulate(arrivals, base_us, per_item_us, max_batch_size, max_queue_delay_us=0.0,
             preferred=(), instances=1):
    """Return (start, finish) arrays for each request, in arrival order."""
    arrivals = [float(x) for x in arrivals]
    n = len(arrivals)
    pref = sorted(set(preferred)) or [max_batch_size]
    delay = max_queue_delay_us / 1e6
    env = simpy.Environment()
    idle = simpy.Store(env, capacity=instances)
    idle.items.extend(range(instances))
    pending: list[int] = []  # request indices, oldest first
    start = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    signal = {"ev": env.event()}

    def notify():
        if not signal["ev"].triggered:
            signal["ev"].succeed()

    def source():
        i = 0
        while i < n:
            if arrivals[i] > env.now:
                yield env.timeout(arrivals[i] - env.now)
            while i < n and arrivals[i] <= env.now:  # everything due at this instant
                pending.append(i)
                i += 1
            notify()

    def execute(batch, inst):
        yield env.timeout((base_us + per_item_us * len(batch)) / 1e6)
        for r in batch:
            finish[r] = env.now
        yield idle.put(inst)

    def batcher():
        served = 0
        while served < n:
            if not pending:
                signal["ev"] = env.event()
                yield signal["ev"]
                continue
            inst = yield idle.get()
            yield env.timeout(0)  # let every event of this instant (arrivals, completions) land first
            while True:
                count = min(len(pending), max_batch_size)
                fitting = [p for p in pref if p <= count]
                oldest = min(arrivals[r] for r in pending[:count])
                expired = delay > 0 and env.now >= oldest + delay
                if fitting and not expired:
                    size = fitting[-1]
                    break
                if delay == 0 or expired:
                    size = count
                    break
                signal["ev"] = env.event()
                yield signal["ev"] | env.timeout(oldest + delay - env.now)
                yield env.timeout(0)
            batch = pending[:size]
            del pending[:size]
            for r in batch:
                start[r] = env.now
            served += size
            env.process(execute(batch, inst))

    env.process(source())
    env.process(batcher())
    env.run()
    return start, finish
