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

INF = float("inf")


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


def simulate_payloads(arrivals, base_us, per_item_us, max_batch_size, max_queue_delay_us=0.0,
                      preferred=(), instances=1):
    """Triton's batcher with its payloads (core r24.10), written from the C++ as SimPy processes:
    ``BatcherThread`` (one process, ``GetDynamicBatch`` with its cursor, mark and best size), one
    process per instance thread (``DequeuePayload``: take the front payload, merge the ones behind
    it past the delay), ``Enqueue``'s wake-up test. One-element requests, no queue policy
    (prefetching on: at most 2 x instances payloads wait). The orderings the course's model fixes
    are fixed the same way: requests sent at one instant all land before the batcher looks; after
    handing a payload over, or when woken by a finished execution, the batcher works until it
    sleeps before an instance thread takes a payload. Returns (start, finish) in arrival order."""
    arrivals = [float(x) for x in arrivals]
    n = len(arrivals)
    pref = sorted(set(preferred)) or [max_batch_size]
    max_pref = pref[-1]
    delay = max_queue_delay_us / 1e6
    env = simpy.Environment()
    start = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    st = {"queue": [], "payload": {"reqs": [], "state": "UNINIT"}, "saturated": False, "next_pref": 0,
          "waiting": [], "cv": env.event(), "idle": [], "done": env.event(), "finished": 0}

    def notify(key):
        if not st[key].triggered:
            st[key].succeed()

    def wake_instances():
        """A payload was handed over: every instance thread waiting in DequeuePayload wakes."""
        for ev in st["idle"]:
            ev.succeed()
        st["idle"].clear()

    def slot_available():
        return len(st["waiting"]) < 2 * instances

    def stale():
        return st["payload"]["state"] in ("EXECUTING", "RELEASED")

    def source():
        i = 0
        while i < n:
            if arrivals[i] > env.now:
                yield env.timeout(arrivals[i] - env.now)
            wake = False
            while i < n and arrivals[i] <= env.now:  # everything sent at this instant
                st["queue"].append(i)
                i += 1
                wake |= slot_available() and (st["saturated"] or stale() or len(st["queue"]) >= st["next_pref"])
            if wake:
                notify("cv")

    def get_dynamic_batch():
        """0 and the pending count to move now, or the wait in seconds (and 0)."""
        payload_size = len(st["payload"]["reqs"])
        pending, best, mark, send_now, oldest = 0, 0, 0, False, INF
        for r in st["queue"]:
            if payload_size + pending != 0:
                if payload_size + pending + 1 > max_pref and best == 0:
                    best, mark = pending, pending
                    st["saturated"] = True
                if payload_size + pending + 1 > max_batch_size:
                    send_now = True
                    break
            pending += 1
            oldest = min(oldest, arrivals[r])
            if pending + payload_size in pref:
                best, mark = pending, pending
        exceeded = delay != 0 and env.now - oldest >= delay - 1e-12  # (SimPy adds the wait to the clock)
        if best != 0 and not exceeded:
            if delay == 0:
                st["saturated"] = True
            return 0.0, mark
        if pending == 0:
            return 0.0, 0
        if send_now or payload_size + pending >= max_pref:
            st["saturated"] = True
            return 0.0, pending
        if exceeded or delay == 0:
            return 0.0, pending
        nxt = [p for p in pref if p > pending + payload_size]
        st["next_pref"] = (nxt[0] if nxt else pref[0]) - payload_size
        if not st["saturated"] and payload_size != 0 and payload_size not in pref:
            return 0.0, pending
        return delay - (env.now - oldest), 0

    def batcher():
        while True:
            if st["saturated"] or stale():
                st["payload"], st["saturated"], st["next_pref"] = {"reqs": [], "state": "UNINIT"}, False, 0
            if not st["queue"]:
                wait = 0.5
            elif not slot_available():
                wait = None  # WaitForPayloadSlotAvailable: until an instance takes a payload
            else:
                wait, move = get_dynamic_batch()
                if wait == 0.0 and move:
                    st["payload"]["reqs"] += st["queue"][:move]
                    del st["queue"][:move]
                    if st["payload"]["state"] == "UNINIT":
                        st["payload"]["state"] = "SCHEDULED"
                        st["waiting"].append(st["payload"])
                        wake_instances()
                if wait == 0.0:
                    continue
            st["cv"] = env.event()
            yield st["cv"] if wait is None else st["cv"] | env.timeout(wait)

    def instance():
        while True:
            if not st["waiting"]:
                st["idle"].append(env.event())
                yield st["idle"][-1]
                continue
            yield env.timeout(0)  # the batcher works until it sleeps before this thread takes a payload
            if not st["waiting"]:
                continue
            payload = st["waiting"].pop(0)
            payload["state"] = "EXECUTING"
            while st["waiting"] and delay > 0 and max_batch_size > 1 and \
                    env.now - min(arrivals[r] for r in st["waiting"][0]["reqs"]) > delay:
                st["waiting"][0]["state"] = "EXECUTING"
                if len(payload["reqs"]) + len(st["waiting"][0]["reqs"]) > max_batch_size:
                    break
                payload["reqs"] += st["waiting"].pop(0)["reqs"]
            notify("cv")  # the payload's callback: taken
            for r in payload["reqs"]:
                start[r] = env.now
            yield env.timeout((base_us + per_item_us * len(payload["reqs"])) / 1e6)
            for r in payload["reqs"]:
                finish[r] = env.now
            st["finished"] += len(payload["reqs"])
            if st["finished"] == n:
                st["done"].succeed()
            notify("cv")  # the payload's callback: executed
            yield env.timeout(0)  # the batcher looks before this thread takes the next payload

    env.process(source())
    env.process(batcher())
    for _ in range(instances):
        env.process(instance())
    if n:
        env.run(until=st["done"])
    return start, finish
