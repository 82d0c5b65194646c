"""Triton's batch forming observed with crafted arrival patterns (`Pattern`: send times and a
`BatchRule`), on the real dynamic batcher and in the simulator (`batchlab.batching.dynamic`: the
decision `next_batch` and the payloads a busy instance lets grow), and how far two lists of batches
differ (`batch_mismatch`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from batchlab.load import RequestSpec, run_open_loop
from batchlab.load.stats import read_stats, settle
from batchlab.load.transport import infer_inputs
from batchlab.probe.batch_time import _settled
from batchlab.server import connect
from batchlab.sim.dynamic import Decide, simulate_rule
from batchlab.batching.dynamic import BatchRule, next_batch


class ProbeError(RuntimeError):
    """The server could not be probed (model control refused, a request failed, …)."""


@dataclass(frozen=True)
class Pattern:
    """Send times (seconds from the start) and the batcher settings to send them to."""

    name: str
    arrivals_s: tuple[float, ...]
    settings: BatchRule
    note: str = ""

    def __post_init__(self) -> None:
        a = np.asarray(self.arrivals_s, dtype=float)
        if a.ndim != 1 or a.size == 0 or np.any(np.diff(a) < 0) or a[0] < 0 or not np.all(np.isfinite(a)):
            raise ValueError(f"pattern {self.name!r}: arrivals must be a non-empty, non-decreasing list of times >= 0")
        object.__setattr__(self, "arrivals_s", tuple(float(x) for x in a))

    @property
    def n(self) -> int:
        """Number of requests."""
        return len(self.arrivals_s)


def burst(n: int, at: float = 0.0) -> tuple[float, ...]:
    """``n`` requests sent at the same instant."""
    return tuple([float(at)] * int(n))


def spaced(n: int, gap_s: float, start: float = 0.0) -> tuple[float, ...]:
    """``n`` requests ``gap_s`` seconds apart."""
    return tuple(float(start + i * gap_s) for i in range(int(n)))


def batches_from_sizes(sizes: Sequence[int]) -> list[int] | None:
    """Batches in order from each request's reported batch size (a batch's requests are consecutive:
    [4, 4, 4, 4, 3, 3, 3] is a batch of 4 then one of 3), or None if inconsistent."""
    out, i, s = [], 0, [int(x) for x in sizes]
    while i < len(s):
        k = s[i]
        if k < 1 or i + k > len(s) or any(x != k for x in s[i:i + k]):
            return None
        out.append(k)
        i += k
    return out


def batch_mismatch(a: Sequence[int] | None, b: Sequence[int] | None) -> float:
    """The share of a pattern's requests served in a batch of a different size in ``a`` than in
    ``b`` (two lists of batch sizes, in the order the batches formed: the n-th request in arrival
    order is in the same batch position in both). A request only one of them served, or a list
    that is None (inconsistent), counts as different."""
    if a is None or b is None:
        return 1.0
    per_a = [size for size in a for _ in range(size)]
    per_b = [size for size in b for _ in range(size)]
    n = max(len(per_a), len(per_b))
    # zip_longest pads the shorter list with None: a request served in one list only differs
    return sum(x != y for x, y in itertools.zip_longest(per_a, per_b)) / n if n else 0.0


@dataclass
class PatternOutcome:
    """One run of a pattern: ``sizes`` the batch size that served each request (arrival order in the
    simulator, completion order on the server), ``histogram`` executions per batch size."""

    pattern: Pattern
    sizes: list[int]
    histogram: dict[int, int]
    latency_ms: np.ndarray
    sent_s: np.ndarray
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def batches(self) -> list[int] | None:
        """Batch sizes in the order the batches were formed (None if the sizes are inconsistent)."""
        return batches_from_sizes(self.sizes)


#: A client sends the requests of a burst one after another: the first reaches the server a moment
#: before the rest (Lab 2's recordings: with delay 0 it often runs alone, the rest batch together).
CLIENT_STAGGER_S = 1e-6


def client_arrivals(arrivals_s: Sequence[float]) -> np.ndarray:
    """When a pattern's requests reach the server in the simulator: each burst's first request at its
    send time, the others `CLIENT_STAGGER_S` later (together)."""
    a = np.asarray(arrivals_s, dtype=float)
    later = np.r_[False, a[1:] == a[:-1]] if a.size else np.zeros(0, bool)
    return a + later * CLIENT_STAGGER_S


def simulate_pattern(pattern: Pattern, service: Any, decide: Decide = next_batch) -> PatternOutcome:
    """The pattern through the simulator with the service model ``service`` (its requests arriving as
    `client_arrivals` has them); ``decide`` takes the batcher's decisions (default the course's
    `next_batch`; Lab 2 plugs in the learner's). A request never sent has size 0 (then ``batches``
    is None)."""
    a = client_arrivals(pattern.arrivals_s)
    res = simulate_rule(a, service, pattern.settings, warmup=0.0, decide=decide)
    r, b = res.records, res.batches
    order = np.argsort(r["arrival"], kind="stable")
    sizes = [int(b["size"][r["batch_id"][i]]) if r["batch_id"][i] >= 0 else 0 for i in order]  # 0: never sent
    hist = Counter(int(k) for k in b["size"])
    return PatternOutcome(pattern, sizes, dict(sorted(hist.items())),
                          latency_ms=(r["finish"] - r["arrival"])[order] * 1e3, sent_s=a,
                          extra={"result": res})


def reloadable(server: Any, models: Sequence[str]) -> contextlib.AbstractContextManager[Any]:
    """A server on which `batcher_config` may reload ``models``: ``server`` itself when it runs with
    explicit model control, else a private embedded one (stopped on exit); a shared one is untouched."""
    if getattr(server, "model_control", None) == "explicit":
        return contextlib.nullcontext(server)
    return connect(models=list(models), private=True)


@contextlib.contextmanager
def batcher_config(server: Any, model: str, settings: BatchRule) -> Iterator[dict[str, Any]]:
    """Reload ``model`` with ``settings``, yield the configuration the server then reports, restore
    the old one on exit. ProbeError when the server refuses model control (see `reloadable`)."""
    client = server.grpc_client()  # the server's own client: reloads need its key (model-repository API)
    try:
        base = client.get_model_config(model, as_json=True)["config"]
        cfg = settings.apply(base)
        try:
            client.load_model(model, config=json.dumps(cfg))
        except InferenceServerException as exc:
            raise ProbeError(f"the server refused to reload {model!r} with new batcher settings: "
                             f"{exc.message() or exc}") from None
        got = client.get_model_config(model, as_json=True)["config"]
        effective = {"max_batch_size": int(got.get("max_batch_size", 0)),
                     "dynamic_batching": got.get("dynamic_batching", {})}
        try:
            yield effective
        finally:
            # Back to the configuration the model had. A plain load_model(model) is not enough:
            # Triton keeps serving the override while the model's files are unchanged.
            with contextlib.suppress(InferenceServerException):
                client.load_model(model, config=json.dumps(base))
    finally:
        client.close()


def run_pattern(server: Any, model: str, pattern: Pattern, inputs: Mapping[str, np.ndarray]) -> PatternOutcome:
    """Send ``pattern`` of one-row requests ``inputs`` to ``model`` (configured, e.g. in `batcher_config`)
    after a warm-up request and the batcher delay + 50 ms of quiet; each answer's BATCH_SIZE tells its batch."""
    first = next(iter(inputs.values()))
    if first.shape[0] != 1:
        raise ValueError(f"pattern requests carry one row each, got an input of shape {first.shape}")
    client = server.grpc_client()
    try:
        base = read_stats(client, model)
        client.infer(model, infer_inputs(grpcclient, inputs))  # warm-up
        time.sleep(pattern.settings.max_queue_delay_us * 1e-6 + 0.05)
        before = _settled(client, model, base, 1)
        seen: dict[int, int] = {}

        def spec(i: int) -> RequestSpec:
            def check(out: Mapping[str, np.ndarray]) -> str | None:
                if "BATCH_SIZE" not in out:
                    return "the response has no BATCH_SIZE output"
                seen[i] = int(np.asarray(out["BATCH_SIZE"]).reshape(-1)[0])
                return None

            return RequestSpec(dict(inputs), check=check)

        report = run_open_loop(server, model, spec, arrivals=list(pattern.arrivals_s), progress=False,
                               stats=False)
        if report.n_errors:
            raise ProbeError(f"pattern {pattern.name!r}: {report.n_errors} request(s) failed: "
                             f"{report.records.errors()}")
        rec = report.records
        # Requests sent at the same instant reach the server in no fixed order, but one instance
        # finishes its batches one after another: ordering by completion groups each batch together.
        order = np.argsort(rec.last, kind="stable")
        sizes = [seen.get(int(rec.index[i]), -1) for i in order]
        batches = batches_from_sizes(sizes)
        delta = settle(lambda: read_stats(client, model), before, pattern.n, len(batches or ())) - before
    finally:
        client.close()
    return PatternOutcome(pattern, sizes, dict(sorted(delta.batch_histogram().items())),
                          latency_ms=rec.latency[order] * 1e3, sent_s=np.asarray(rec.sent, float)[order],
                          extra={"server": delta})


def run_patterns(server: Any, model: str, patterns: Sequence[Pattern], inputs: Mapping[str, np.ndarray],
                 service: Any) -> list[dict[str, Any]]:
    """Each pattern on the server and in the simulator (service model ``service``), one reload per
    batcher setting: per pattern a dict of ``pattern``, ``config`` (as reported), ``real``, ``sim``."""
    out: dict[int, dict[str, Any]] = {}
    groups: dict[BatchRule, list[int]] = {}
    for i, p in enumerate(patterns):
        groups.setdefault(p.settings, []).append(i)
    for settings, idx in groups.items():
        with batcher_config(server, model, settings) as effective:
            for i in idx:
                real = run_pattern(server, model, patterns[i], inputs)
                out[i] = {"pattern": patterns[i], "config": effective, "real": real,
                          "sim": simulate_pattern(patterns[i], service)}
    return [out[i] for i in range(len(patterns))]


def chapter_patterns() -> list[Pattern]:
    """Chapter 02's patterns, one per clause of the rule; delays and gaps large enough that timer
    jitter on a busy machine cannot change the outcome."""
    d8 = BatchRule(max_batch_size=8, max_queue_delay_us=150_000)
    pref = BatchRule(max_batch_size=8, preferred=(4, 8), max_queue_delay_us=150_000)
    nodelay = BatchRule(max_batch_size=8)
    return [
        Pattern("A 5 条同时到", burst(5), d8, "不满 max_batch_size：等最老的请求等满 150 ms，5 条一锅"),
        Pattern("B 11 条同时到", burst(11), d8, "凑满 8 条立即下锅，剩下 3 条等满窗口再走"),
        Pattern("C 每 40 ms 一条", spaced(6, 0.040), d8, "窗口从最老的请求算起：0–120 ms 的 4 条一锅，其余 2 条一锅"),
        Pattern("D 偏好 [4, 8]，7 条同时到", burst(7), pref, "能凑到的最大偏好批是 4：立即发 4 条，剩 3 条等满窗口"),
        Pattern("E 不设延时，每 40 ms 一条", spaced(5, 0.040), nodelay, "延时为 0：实例一空就发，来一条走一条"),
    ]
