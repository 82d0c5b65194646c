"""Record the batches Lab 2 replays: arrival patterns sent to the real server, each several times,
with the batch sizes Triton formed on every recording (``python -m batchlab.labs.record_lab2``
re-records them on this machine; about 5 minutes).

The patterns are chapter 02's (`batchlab.probe.chapter_patterns`), the ones `extra_patterns` adds for
the clauses a busy instance brings out, and seeded random ones (`random_patterns`): busy instances,
preferred sizes, delay 0 with several preferred sizes, gaps shorter than a batch. None is chosen or
dropped by what the course's rule predicts: every pattern is sent ``repeats`` times (the repeats in
interleaved rounds, `batchlab.probe.run_patterns`) and every recording is stored. An arrival that
races an instance's finish can make recordings of one pattern differ; `fidelity` compares the
simulator with the recordings against the recordings' own spread.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from batchlab.labs import recorded
from batchlab.probe import (Pattern, batch_mismatch, burst, calibrate_service, chapter_patterns, isotonic,
                            reloadable, run_patterns, simulate_pattern, spaced)
from batchlab.sim import BatchRule, Table

#: Random patterns drawn by default; with chapter 02's and `extra_patterns` they make the data set.
RANDOM_COUNT = 24
#: Recordings of each pattern by default: an arrival racing an instance's finish can go either way,
#: so recordings that agree ten times out of ten say more than five out of five.
REPEATS = 10


def extra_patterns() -> list[Pattern]:
    """Patterns for what a busy instance brings out: the delay expiring while it is busy (F), the
    batch that grows one past the preferred size (G) and delay 0 with a preferred size (H)."""
    f = [Pattern(f"F 偏好 [8]、延时 {d // 1000} ms，20 条同时到", burst(20), BatchRule(16, (8,), d),
                 f"偏好的 8 条交出去、实例取走前又多收 1 条（9 条）；实例忙的几十 ms 里剩下 11 条的 {d // 1000} ms 延时已过："
                 "一空闲就一起发（实例抢先取走了 8 条、或线程醒来的先后不同时，后面的批跟着变）")
         for d in (5_000, 10_000)]
    g = Pattern("G 偏好 [3]，每 2 ms 一条", spaced(19, 0.002), BatchRule(12, (3,), 150_000),
                "实例忙时，已凑够偏好 3 条、在等实例的批还会再收下一条：之后每批 4 条")
    h = Pattern("H 偏好 [4]、不设延时，7 条同时到", burst(7), BatchRule(8, (4,)),
                "延时为 0 时偏好批照样截断：凑到 4 条就发，剩下的另起一批")
    return f + [g, h]


def random_patterns(seed: int = 0, count: int = RANDOM_COUNT) -> list[Pattern]:
    """``count`` arrival patterns drawn from ``seed``: 2 to 5 bursts some milliseconds apart, with
    a ``max_batch_size``, preferred sizes and ``max_queue_delay`` drawn too. Every fourth pattern
    has delay 0 and two preferred sizes, every fourth one preferred size, a delay and gaps shorter
    than a batch takes, every fourth no preferred size; the rest draw freely."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        m = int(rng.choice([4, 6, 8, 12, 16]))
        sizes = [s for s in (2, 3, 4, 6, 8) if s < m]
        family = i % 4
        k = (2, 1, 0, int(rng.choice([0, 1, 2])))[family]
        preferred = tuple(sorted(int(s) for s in rng.choice(sizes, size=min(k, len(sizes)), replace=False)))
        delay_us = 0 if family == 0 else int(rng.choice([0, 30_000, 80_000, 150_000][family == 1:]))
        gaps = [0.005, 0.01, 0.02] if family == 1 else [0.005, 0.01, 0.02, 0.04, 0.08, 0.12]
        t, arrivals = 0.0, []
        for _ in range(int(rng.integers(2, 6))):
            arrivals += [round(t, 4)] * int(rng.integers(1, min(m + 4, 11)))
            t += float(rng.choice(gaps))
        out.append(Pattern(f"R{seed}-{i}", tuple(arrivals), BatchRule(m, preferred, delay_us),
                           f"随机模式（seed {seed} 第 {i} 个）"))
    return out


def all_patterns(seed: int = 0, count: int = RANDOM_COUNT) -> list[Pattern]:
    """What the recorder sends: chapter 02's patterns, `extra_patterns` and `random_patterns`."""
    return chapter_patterns() + extra_patterns() + random_patterns(seed, count)


def recorded_service(data: Mapping[str, Any]) -> Table:
    """The service model of the recordings: per batch size, the median over the recordings of the
    server's time per execution (its statistics, batches of one-row requests as the patterns formed
    them), made non-decreasing (`batchlab.probe.isotonic`, weighted by how many recordings ran the
    size); sizes never run are interpolated."""
    runs: dict[int, list[float]] = {}
    for entry in data["patterns"]:
        for execution in entry["execution_ms"]:
            for size, ms in execution.items():
                runs.setdefault(int(size), []).append(float(ms))
    sizes = sorted(runs)
    smooth = isotonic(np.array([np.median(runs[b]) for b in sizes]), np.array([len(runs[b]) for b in sizes], float))
    return Table(tuple(sizes), tuple(float(t) for t in smooth), unit="ms")


def record_batches(server: Any, repeats: int = REPEATS, seed: int = 0, count: int = RANDOM_COUNT,
                   model: str = "embed") -> dict[str, Any]:
    """Calibrate ``model``'s service times, send every pattern of `all_patterns` ``repeats`` times
    (interleaved rounds) and return every recording: the batches formed, in order, the server's
    time per execution of each batch size, and when the client actually sent each request."""
    row = np.zeros((1, 16), np.int32)
    row[0, :3] = (5, 6, 7)
    patterns = all_patterns(seed, count)
    with reloadable(server, [model]) as lab:
        cal = calibrate_service(lab, model, batch_sizes=(1, 2, 4, 8, 16), rows_per_size=48, min_requests=4)
        service = cal.service()
        runs = [run_patterns(lab, model, patterns, {"TOKENS": row}, service) for _ in range(repeats)]
    entries = [{
        "name": p.name, "note": p.note, "arrivals_s": list(p.arrivals_s),
        "max_batch_size": p.settings.max_batch_size, "preferred": list(p.settings.preferred),
        "max_queue_delay_us": p.settings.max_queue_delay_us,
        "recordings": [r[i]["real"].batches for r in runs],
        "execution_ms": [{str(b): round(ms, 3) for b, ms in r[i]["real"].extra["server"].batch_service_ms().items()}
                         for r in runs],
        "sent_ms": [_sent_ms(r[i]["real"]) for r in runs]} for i, p in enumerate(patterns)]
    return {**recorded.header(model, repeats), "seed": seed,
            "service_ms": {str(b): round(cal.service_ms[b], 4) for b in sorted(cal.service_ms)},
            "patterns": entries}


def _sent_ms(outcome: Any) -> list[float]:
    """When the client actually sent each request of a recording, in ms from its first send."""
    sent = np.sort(np.asarray(outcome.sent_s, dtype=float))
    return [round(float(x), 2) for x in (sent - sent[0]) * 1e3] if sent.size else []


def pattern_of(entry: Mapping[str, Any]) -> Pattern:
    """The `Pattern` of one recorded entry."""
    return Pattern(entry["name"], tuple(entry["arrivals_s"]),
                   BatchRule(int(entry["max_batch_size"]), tuple(entry["preferred"]), float(entry["max_queue_delay_us"])),
                   entry.get("note", ""))


def agreed(entry: Mapping[str, Any]) -> list[int] | None:
    """The batches every recording of ``entry`` formed, or None when the recordings differ."""
    first = entry["recordings"][0]
    return list(first) if first is not None and all(r == first for r in entry["recordings"]) else None


def spread(recordings: Sequence[Sequence[int] | None]) -> float:
    """Mean `batch_mismatch` over pairs of recordings: how much the server disagrees with itself."""
    pairs = [(a, b) for i, a in enumerate(recordings) for b in recordings[i + 1:]]
    return float(np.mean([batch_mismatch(a, b) for a, b in pairs])) if pairs else 0.0


def fidelity(data: Mapping[str, Any], service: Any = None) -> list[dict[str, Any]]:
    """Per recorded pattern: the simulator's batches (`simulate_pattern` with `recorded_service`, or
    ``service``), ``sim_vs_recording`` (mean `batch_mismatch` with each recording),
    ``recording_vs_recording`` (`spread`) and ``agreed`` (`agreed`)."""
    service = recorded_service(data) if service is None else service
    out = []
    for entry in data["patterns"]:
        sim = simulate_pattern(pattern_of(entry), service).batches
        out.append({"name": entry["name"], "sim": sim, "recordings": entry["recordings"], "agreed": agreed(entry),
                    "sim_vs_recording": float(np.mean([batch_mismatch(sim, r) for r in entry["recordings"]])),
                    "recording_vs_recording": spread(entry["recordings"])})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    def summary(d: dict[str, Any]) -> str:
        rows = fidelity(d)
        return (f"{len(rows)} patterns x {d['repeats']} recordings, all stored; recordings agree on "
                f"{sum(r['agreed'] is not None for r in rows)}; mismatch simulator vs recording "
                f"{np.mean([r['sim_vs_recording'] for r in rows]):.3f}, recording vs recording "
                f"{np.mean([r['recording_vs_recording'] for r in rows]):.3f}")
    return recorded.main(argv, __doc__, "lab2_batches", "embed", RANDOM_COUNT, record_batches, summary, REPEATS)


if __name__ == "__main__":
    raise SystemExit(main())
