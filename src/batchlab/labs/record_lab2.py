"""Record the batches Lab 2's first check replays: arrival patterns sent to the real server, with the
batch sizes Triton formed (``python -m batchlab.labs.record_lab2`` re-records them on this machine).

The patterns are chapter 02's A–E (`batchlab.probe.chapter_patterns`), one that needs the rule's
"delay expired: send what fits" clause on a busy instance, and seeded random ones (`random_patterns`:
``max_batch_size``, preferred sizes, delays and bursts drawn from a seed). A random pattern is a
candidate only when the course's rule (`batchlab.sim.rule.next_batch`) forms the same batches with
the service times halved or doubled and each burst moved by a few milliseconds: its outcome does not
hang on timer jitter. Each candidate is sent ``repeats`` times (`batchlab.probe.run_patterns`);
a pattern is kept only when the server's batches equal the course rule's prediction on every
recording. Requests carry one row each: the probe sends no multi-element requests.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from batchlab.labs import recorded
from batchlab.probe import Pattern, burst, calibrate_service, chapter_patterns, reloadable, run_patterns, simulate_pattern
from batchlab.sim import BatchRule, Table



def extra_patterns() -> list[Pattern]:
    """A pattern for the clause chapter 02's five leave untested: the delay expires while the
    instance is busy, so what fits goes, past the preferred size."""
    return [Pattern(f"F 偏好 [8]、延时 {d // 1000} ms，20 条同时到", burst(20), BatchRule(16, (8,), d),
                    f"先发偏好的 8 条；实例忙的 20 多 ms 里剩下 12 条的 {d // 1000} ms 延时已过：一空闲就把 12 条一起发")
            for d in (5_000, 10_000)]


def random_patterns(seed: int = 0, count: int = 40) -> list[Pattern]:
    """``count`` arrival patterns drawn from ``seed``: bursts of requests some tens of milliseconds
    apart, with a ``max_batch_size``, preferred sizes and ``max_queue_delay`` each drawn too."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        m = int(rng.choice([4, 6, 8, 12, 16]))
        sizes = [s for s in (2, 3, 4, 6, 8) if s < m]
        k = int(rng.choice([0, 1, 1, 2]))
        preferred = tuple(sorted(int(s) for s in rng.choice(sizes, size=k, replace=False))) if k else ()
        delay_us = int(rng.choice([0, 30_000, 80_000, 150_000]))
        t, arrivals = 0.0, []
        for _ in range(int(rng.integers(2, 6))):
            arrivals += [round(t, 4)] * int(rng.integers(1, min(m + 4, 11)))
            t += float(rng.choice([0.01, 0.03, 0.06, 0.1, 0.2]))
        out.append(Pattern(f"R{seed}-{i}", tuple(arrivals), BatchRule(m, preferred, delay_us),
                           f"随机模式（seed {seed} 第 {i} 个）"))
    return out


def robust(pattern: Pattern, service: Any, trials: int = 8, shift_s: float = 0.004, spread_s: float = 0.005,
           seed: int = 0) -> bool:
    """True when the course's rule forms the same batches with the service times halved, doubled or
    next to nothing (so no decision hangs on a busy instance: Triton pre-forms batches then, see
    `batchlab.sim.rule`), and with each burst moved by up to ``shift_s`` and its requests spread
    over up to ``spread_s`` (a client does not send a burst in one instant); ``trials`` draws."""
    want = simulate_pattern(pattern, service).batches
    for scale in (0.01, 0.5, 2.0):
        if simulate_pattern(pattern, _scaled(service, scale)).batches != want:
            return False
    rng = np.random.default_rng(seed)
    times = np.asarray(pattern.arrivals_s)
    groups = np.unique(times)
    for _ in range(trials):
        moved = dict(zip(groups.tolist(), (groups + rng.uniform(-shift_s, shift_s, groups.size)).tolist()))
        jittered = np.array([moved[x] for x in times.tolist()]) + rng.uniform(0, spread_s, times.size)
        p = Pattern(pattern.name, tuple(np.sort(np.maximum(jittered, 0.0))), pattern.settings)
        if simulate_pattern(p, service).batches != want:
            return False
    return True


def _scaled(service: Table, scale: float) -> Table:
    return Table(service.batch_sizes, tuple(t * scale for t in service.times), service.unit)


def service_table(service_ms: Mapping[Any, float]) -> Table:
    """The simulator's service model from the recorded one-execution times (ms per batch size)."""
    ms = {int(b): float(t) for b, t in service_ms.items()}  # JSON keys are strings
    return Table(tuple(sorted(ms)), tuple(ms[b] for b in sorted(ms)), unit="ms")


def candidates(service: Table, seed: int = 0, count: int = 40) -> list[Pattern]:
    """Chapter 02's patterns, `extra_patterns`, and the robust ones of `random_patterns`."""
    return chapter_patterns() + extra_patterns() + [p for p in random_patterns(seed, count) if robust(p, service)]


def record_batches(server: Any, repeats: int = 3, seed: int = 0, count: int = 40,
                   model: str = "embed") -> dict[str, Any]:
    """Calibrate ``model``'s service times, send every candidate ``repeats`` times, and return the data
    of the patterns whose real batches equal the course rule's prediction on every recording."""
    row = np.zeros((1, 16), np.int32)
    row[0, :3] = (5, 6, 7)
    with reloadable(server, [model]) as lab:
        cal = calibrate_service(lab, model, batch_sizes=(1, 2, 4, 8, 16), rows_per_size=48, min_requests=4)
        service = cal.service()
        patterns = candidates(service, seed, count)
        runs = [run_patterns(lab, model, patterns, {"TOKENS": row}, service) for _ in range(repeats)]
    kept, dropped = [], []
    for i, p in enumerate(patterns):
        real = [r[i]["real"].batches for r in runs]
        sim = runs[0][i]["sim"].batches
        entry = {"name": p.name, "note": p.note, "arrivals_s": list(p.arrivals_s),
                 "max_batch_size": p.settings.max_batch_size, "preferred": list(p.settings.preferred),
                 "max_queue_delay_us": p.settings.max_queue_delay_us, "batches": sim}
        (kept if all(b == sim for b in real) else dropped).append({**entry, "real": real} if any(b != sim for b in real)
                                                                    else entry)
    return {**recorded.header(model, repeats),
            "kept": "patterns whose server batches equal the course rule's prediction on every recording",
            "seed": seed, "service_ms": {str(b): round(cal.service_ms[b], 4) for b in sorted(cal.service_ms)},
            "patterns": kept, "dropped": [{"name": d["name"], "real": d.get("real"), "rule": d["batches"]}
                                          for d in dropped]}


def pattern_of(entry: dict[str, Any]) -> Pattern:
    """The `Pattern` of one recorded entry."""
    return Pattern(entry["name"], tuple(entry["arrivals_s"]),
                   BatchRule(int(entry["max_batch_size"]), tuple(entry["preferred"]), float(entry["max_queue_delay_us"])),
                   entry.get("note", ""))


def main(argv: Sequence[str] | None = None) -> int:
    return recorded.main(argv, __doc__, "lab2_batches", "embed", 40, record_batches, lambda d: (
        f"{len(d['patterns'])} patterns kept ({sum(len(p['batches']) for p in d['patterns'])} batches), "
        f"{len(d['dropped'])} dropped: {[x['name'] for x in d['dropped']]}"))


if __name__ == "__main__":
    raise SystemExit(main())
