"""Record the slot timelines Lab 3's slot-assignment check (question 6) replays: control-input
sequences sent to the real server's ``lm_step`` (``direct``, reloaded with 2–4 slots), with the batch
slot (output SLOT) each request ran in (``python -m batchlab.labs.record_lab3`` re-records them on this machine).

A timeline is a list of events ``(seq, kind)``: "start" (the first request, with START), "step",
"end" (with END) and "idle" (the sequence goes silent past ``max_sequence_idle_microseconds``: no
request is sent, Triton's reaper frees its slot). Events are sent one at a time; a "start" that finds
no free slot waits in the backlog (its answer comes once a slot frees). Sequences that hold a slot
get unrecorded keep-alive steps so that only "idle" sequences are reaped. Each timeline is recorded
``repeats`` times and kept only when all recordings give every request the same slot.
"""

from __future__ import annotations

import json
import queue
import time
from typing import Any, Sequence

import numpy as np
import tritonclient.grpc as grpcclient

from batchlab.labs import recorded
from batchlab.batching.slots import SequenceRequest, SequenceSlots
from batchlab.load.transport import infer_inputs

IDLE_S = 2.0       # the recording model's max_sequence_idle_microseconds
ANSWER_S = 0.2     # how long an answer may take before its request counts as backlogged
KEEP_ALIVE_S = 0.4


def _reference_slots(events: Sequence[Sequence[Any]], n_slots: int) -> list[int | None]:
    """The slot of each event by chapter 03's `SequenceSlots` (one instance, ``direct``); None for "idle"."""
    slots = SequenceSlots("direct", 1, n_slots, 0)
    out: list[int | None] = [None] * len(events)
    where: dict[int, int] = {}   # id(request) -> event index
    latest: dict[int, SequenceRequest] = {}
    steps: dict[int, int] = {}

    def run() -> None:  # execute what waits in the slots (the answers come back in slot order)
        while slots.waiting[0]:
            for number, request in enumerate(slots.take(0, 0.0)):
                if request is not None:
                    out[where[id(request)]] = number
                    request.finish = 0.0

    for i, (seq, kind) in enumerate(events):
        if kind == "idle":
            slots.reap(latest[seq], 0.0)
        else:
            request = SequenceRequest(seq, steps.get(seq, 0), kind == "end", 0.0)
            steps[seq] = request.step + 1
            where[id(request)], latest[seq] = i, request
            slots.arrive(request, 0.0)
        run()
    return out


def random_timelines(seed: int = 0, count: int = 12) -> list[dict[str, Any]]:
    """``count`` timelines drawn from ``seed``: 2–4 slots, up to 7 sequences that start, step, end or
    go idle; no sequence starts once the backlog has waited 3 events, nor while 2 wait; every
    sequence ends or goes idle (an idle only with an empty backlog: the wait outlasts the timeout)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        n_slots = int(rng.choice([2, 3, 4]))
        events: list[tuple[int, str]] = []
        started, idles, wait = 0, 0, 0
        while True:
            holders = [s for s in range(started) if _holds(events, n_slots, s)]
            backlog = [s for s in range(started) if _state(events, s) == "live" and s not in holders]
            wait = wait + 1 if backlog else 0
            choices = []
            if started < 7 and len(backlog) < 2 and wait < 3:
                choices += ["start"] * 3
            if holders:
                choices += ["step", "end", "end"] + (["idle"] if not backlog and idles < (k % 3 == 0) else [])
            if not choices:
                break
            kind = str(rng.choice(choices))
            if kind == "start":
                events.append((started, "start"))
                started += 1
                continue
            seq = int(rng.choice(holders))
            idles += kind == "idle"
            events.append((seq, kind))
        out.append({"name": f"T{seed}-{k}", "n_slots": n_slots, "events": [list(e) for e in events]})
    return out


def _state(events: list[tuple[int, str]], seq: int) -> str:
    kinds = [k for s, k in events if s == seq]
    return "over" if kinds and kinds[-1] in ("end", "idle") else "live"


def _holds(events: list[tuple[int, str]], n_slots: int, seq: int) -> bool:
    """True when live ``seq``'s start has run (it holds a slot) after ``events``."""
    if _state(events, seq) != "live":
        return False
    firsts = [i for i, (s, k) in enumerate(events) if s == seq and k == "start"]
    return bool(firsts) and _reference_slots(events, n_slots)[firsts[0]] is not None


def _send(client: Any, model: str, corr: int, kind: str, answers: "queue.Queue[Any]", index: int) -> None:
    inputs = infer_inputs(grpcclient, {"TOKENS": np.array([[5, 6, 7]], np.int32)}) if kind == "start" else []
    client.async_infer(model, inputs, callback=lambda result, error: answers.put((index, result, error)), sequence_id=corr,
                       sequence_start=kind == "start", sequence_end=kind == "end")


def record_once(client: Any, model: str, timeline: dict[str, Any], base: int) -> list[int | None]:
    """Send ``timeline`` once (correlation ids ``base + seq``); the SLOT each event's request ran in."""
    answers: queue.Queue[Any] = queue.Queue()
    slots: list[Any] = [None] * len(timeline["events"])
    last: dict[int, float] = {}
    holding: set[int] = set()

    def collect(until: float) -> None:
        while (left := until - time.monotonic()) > 0:
            try:
                i, r, e = answers.get(timeout=left)
            except queue.Empty:
                return
            if i < 0:
                continue  # a keep-alive's answer
            slots[i] = "error" if e is not None else int(r.as_numpy("SLOT")[0, 0])
            seq, kind = timeline["events"][i]
            if e is None and kind not in ("end", "idle"):
                holding.add(seq)

    def keep_alive(skip: int = -1) -> None:
        for seq in sorted(holding):
            if seq != skip and time.monotonic() - last[seq] > KEEP_ALIVE_S:
                _send(client, model, base + seq, "step", answers, -1)
                last[seq] = time.monotonic()
        collect(time.monotonic() + 0.05)

    for i, (seq, kind) in enumerate(timeline["events"]):
        keep_alive()
        if kind == "idle":
            holding.discard(seq)
            end = time.monotonic() + IDLE_S + 1.0
            while time.monotonic() < end:
                keep_alive()
                collect(min(end, time.monotonic() + 0.1))
            continue
        last[seq] = time.monotonic()
        if kind == "end":
            holding.discard(seq)
        _send(client, model, base + seq, kind, answers, i)
        collect(time.monotonic() + ANSWER_S)
    collect(time.monotonic() + 1.0)
    return slots


def record_slots(server: Any, repeats: int = 3, seed: int = 0, count: int = 12,
                 model: str = "lm_step") -> dict[str, Any]:
    """Reload ``model`` per slot count, send every timeline ``repeats`` times, keep those that repeat."""
    client = server.grpc_client()
    base = client.get_model_config(model, as_json=True)["config"]
    timelines, kept, dropped, corr = random_timelines(seed, count), [], [], 500_000
    for n in sorted({t["n_slots"] for t in timelines}):
        cfg = dict(base, max_batch_size=n, sequence_batching=dict(base["sequence_batching"],
                                                                  max_sequence_idle_microseconds=int(IDLE_S * 1e6)))
        client.load_model(model, config=json.dumps(cfg))
        for t in (t for t in timelines if t["n_slots"] == n):
            runs = [record_once(client, model, t, corr + 100 * r) for r in range(repeats)]
            corr += 100 * repeats
            entry = {**t, "slots": runs[0], "course_rule": _reference_slots(t["events"], n) == runs[0]}
            if all(r == runs[0] for r in runs):
                kept.append(entry)
            else:
                dropped.append({**entry, "runs": runs})
    return {**recorded.header(model, repeats),
            "idle_s": IDLE_S, "seed": seed, "kept": "timelines whose slots repeat on every recording",
            "timelines": kept, "dropped": dropped}


def main(argv: Sequence[str] | None = None) -> int:
    return recorded.main(argv, __doc__, "lab3_slots", "lm_step", 12, record_slots, lambda d: (
        f"{len(d['timelines'])} timelines kept ({sum(t['course_rule'] for t in d['timelines'])} equal "
        f"SequenceSlots), {len(d['dropped'])} dropped"))


if __name__ == "__main__":
    raise SystemExit(main())
