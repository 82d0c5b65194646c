"""Queueing results for a batching server (Poisson arrivals at rate λ, one instance serving batches),
each checked against the simulator in chapter 04. Times in seconds, rates per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from batchlab._validate import count, non_negative, optional_count, positive


def as_batch_time(batch_time: Any) -> Callable[[int], float]:
    """Seconds per execution of b items, from a callable ``b -> s``, an object with ``.time(b)``
    (the simulator's `Affine` / `Table`), or a pair ``(a_s, b_s)`` meaning a + b·B seconds."""
    if isinstance(batch_time, tuple) and len(batch_time) == 2:
        a, b = non_negative("a", batch_time[0]), non_negative("b", batch_time[1])
        if a + b <= 0:
            raise ValueError("a + b must be > 0")
        return lambda k: a + b * k
    fn = getattr(batch_time, "time", None)
    if callable(fn):
        return lambda k: float(fn(int(k)))
    if callable(batch_time):
        return lambda k: float(batch_time(int(k)))
    raise ValueError("batch_time must be a callable b -> seconds, an object with .time(b), or (a_s, b_s)")


def _poisson_pmf(mu: float, n: int) -> np.ndarray:
    """P(A = j) for j = 0 … n − 1, A ~ Poisson(mu)."""
    if mu == 0:
        return np.eye(1, n)[0]
    log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n, dtype=float)))])[:n]
    return np.exp(np.arange(n) * math.log(mu) - mu - log_fact)


def little_wait(n_queue: float, t_batch: float, batch_mean: float, utilization: float = 1.0,
                instances: int = 1) -> float:
    """W̄q = L̄q · T̄_batch / (K · U · B̄): Little's law, λ = K·U·B̄ / T̄_batch, for K busy instances.

    With U = 1 and K = 1 it is the article's N_queue · T_batch / B_size: exact when saturated,
    too small by 1/U at light load.
    """
    nq = non_negative("n_queue", n_queue)
    tb = positive("t_batch", t_batch)
    bm = positive("batch_mean", batch_mean)
    u = positive("utilization", utilization)
    if u > 1.0 + 1e-9:
        raise ValueError(f"utilization must lie in (0, 1], got {utilization!r}")
    k = count("instances", instances)
    return nq * tb / (k * u * bm)


@dataclass(frozen=True)
class WindowResult:
    """The light-load batching window: mean wait (s), mean window length (s), mean batch size."""

    wait_s: float
    window_s: float
    batch_mean: float


def window_wait(arrival_rate: float, max_queue_delay_s: float, max_batch_size: int | None) -> WindowResult:
    """Mean wait in a window opened by an arrival at an idle server (light load: windows do not
    overlap executions), closed after D = ``max_queue_delay_s`` or at K = ``max_batch_size``.

    With N(t) the later arrivals and m = K − 1: E[τ] = (1/λ) Σ_{j<m} P(N(D) > j),
    E[∫₀^τ N dt] = (1/λ) Σ_{j<m} j·P(N(D) > j), W̄ = (E[τ] + E[∫N]) / (1 + λE[τ]),
    B̄ = 1 + λE[τ]; for K = None (no limit) W̄ = (D + λD²/2)/(1 + λD).
    """
    lam = positive("arrival_rate", arrival_rate)
    d = non_negative("max_queue_delay_s", max_queue_delay_s)
    k = optional_count("max_batch_size", max_batch_size)
    if d == 0 or k == 1:
        return WindowResult(0.0, 0.0, 1.0)
    if k is None:
        tau = d
        integral = lam * d * d / 2.0
    else:
        m = k - 1
        sf = np.clip(1.0 - np.cumsum(_poisson_pmf(lam * d, m)), 0.0, 1.0)  # P(N(D) > j), j < m
        tau = float(sf.sum()) / lam
        integral = float((np.arange(m) * sf).sum()) / lam
    batch = 1.0 + lam * tau
    return WindowResult((tau + integral) / batch, tau, batch)


@dataclass(frozen=True)
class BatchQueueResult:
    """Exact means of the greedy batch queue (`batch_queue`). ``wait_s`` ends at the start of
    execution, ``latency_s`` at its end; ``p_idle``: P(an execution ends with nobody waiting);
    ``throughput_rps`` equals the arrival rate when the truncation (``states``) is good.
    """

    arrival_rate: float
    max_batch_size: int | None
    wait_s: float
    latency_s: float
    queue_mean: float
    batch_mean: float
    utilization: float
    p_idle: float
    throughput_rps: float
    capacity_rps: float
    states: int
    distribution: np.ndarray


def _solve_chain(lam: float, t: Callable[[int], float], k_max: int | None, n: int):
    states = np.arange(n)
    k = np.where(states == 0, 1, states if k_max is None else np.minimum(states, k_max))
    base = np.where(states == 0, 0, states - k)
    times = np.array([t(int(x)) for x in k])
    P = np.zeros((n, n))
    cache: dict[float, np.ndarray] = {}
    for i in range(n):
        mu = lam * times[i]
        width = n - base[i]
        pm = cache.get(mu)
        if pm is None or pm.size < width:
            pm = _poisson_pmf(mu, n)
            cache[mu] = pm
        row = pm[:width].copy()
        row[-1] += max(0.0, 1.0 - row.sum())  # lump the tail into the last state
        P[i, base[i]:] = row
    A = P.T - np.eye(n)
    A[-1, :] = 1.0
    rhs = np.zeros(n)
    rhs[-1] = 1.0
    pi = np.linalg.solve(A, rhs)
    pi = np.clip(pi, 0.0, None)
    pi /= pi.sum()
    return pi, k, base, times


def batch_queue(arrival_rate: float, batch_time: Any, max_batch_size: int | None,
                tol: float = 1e-10, max_states: int = 4000) -> BatchQueueResult:
    """Mean wait, latency and batch size of Triton's dynamic batcher with delay 0, exactly.

    Embedded chain of the bulk-service queue (Bailey 1954; Neuts 1967) with size-dependent t(k)
    (Inoue, arXiv:1912.06322): Q' = max(Q − K, 0) + A, A ~ Poisson(λ·t(min(Q, K))) (1 after an
    idle period), solved truncated; time averages by renewal–reward. ``batch_time``: see
    `as_batch_time`; K = None: no limit. ValueError at or too near capacity for ``max_states``.
    """
    lam = positive("arrival_rate", arrival_rate)
    t = as_batch_time(batch_time)
    k_max = optional_count("max_batch_size", max_batch_size)
    if k_max is not None:
        cap = k_max / t(k_max)
    else:
        big = 10_000
        slope = (t(2 * big) - t(big)) / big  # per-item cost at large batches
        cap = math.inf if slope <= 0 else 1.0 / slope
    if lam >= cap:
        raise ValueError(f"unstable: arrival rate {lam:.4g}/s is not below capacity {cap:.4g}/s")
    n = 64 if k_max is None else max(64, 4 * k_max)
    while True:
        pi, k, base, times = _solve_chain(lam, t, k_max, n)
        tail = pi[int(0.9 * n):].sum()
        if tail < tol:
            break
        if n >= max_states:
            raise ValueError(f"load {lam / cap:.3f} of capacity is too close to saturation for a chain "
                             f"of {max_states} states (tail mass {tail:.1e}); use the simulator")
        n = min(2 * n, max_states)
    idle = np.where(np.arange(n) == 0, 1.0 / lam, 0.0)
    cycle = times + idle
    waiting = base * times + lam * times ** 2 / 2.0      # ∫ (number waiting) dt over one cycle
    in_service = k * times                               # ∫ (number in service) dt
    mean_cycle = float(pi @ cycle)
    lq = float(pi @ waiting) / mean_cycle
    l_sys = lq + float(pi @ in_service) / mean_cycle
    return BatchQueueResult(
        arrival_rate=lam, max_batch_size=k_max, wait_s=lq / lam, latency_s=l_sys / lam, queue_mean=lq,
        batch_mean=float(pi @ k), utilization=float(pi @ times) / mean_cycle, p_idle=float(pi[0]),
        throughput_rps=float(pi @ k) / mean_cycle, capacity_rps=float(cap), states=n, distribution=pi,
    )


def bailey_roots(mu: float, capacity: int, iterations: int = 2000) -> np.ndarray:
    """The K − 1 roots of z^K = e^{μ(z−1)} inside the unit disk (μ < K), by fixed point + Newton."""
    mu = non_negative("mu", mu)
    s = count("capacity", capacity)
    if mu >= s:
        raise ValueError(f"need μ = λT < K for the roots to lie inside the disk, got μ={mu:.4g}, K={s}")
    roots = []
    for j in range(1, s):
        w = np.exp(2j * np.pi * j / s)
        z = 0.0 + 0.0j
        for _ in range(iterations):
            z, z_old = w * np.exp(mu * (z - 1.0) / s), z
            if abs(z - z_old) < 1e-15:
                break
        for _ in range(5):  # Newton polish on f(z) = z^K − e^{μ(z−1)}
            f = z ** s - np.exp(mu * (z - 1.0))
            df = s * z ** (s - 1) - mu * np.exp(mu * (z - 1.0))
            if df == 0:
                break
            z = z - f / df
        roots.append(z)
    return np.asarray(roots, dtype=complex)


@dataclass(frozen=True)
class BaileyResult:
    """Bailey's queue: ``queue_at_completion`` E[Q] (waiting when an execution ends), ``p_empty``
    P(Q = 0), ``wait_s`` mean arrival-to-start wait under ``rule``."""

    arrival_rate: float
    batch_time_s: float
    capacity: int
    rule: str
    queue_at_completion: float
    p_empty: float
    wait_s: float
    roots: np.ndarray


def bailey_queue(arrival_rate: float, batch_time_s: float, capacity: int, rule: str = "greedy") -> BaileyResult:
    """Bailey's closed form for batches of up to K with a constant time T (μ = λT < K).

    With z_k the `bailey_roots`: E[Q] = μ + Σ_k 1/(1 − z_k) − (K(K−1) − μ²)/(2(K − μ)),
    P(Q = 0) = (K − μ) ∏_k (−z_k)/(1 − z_k); K = 1 is M/D/1. ``rule="greedy"``: an idle server
    serves the next arrival at once (Triton, delay 0); ``"bus"``: executions every T regardless.
    """
    lam = positive("arrival_rate", arrival_rate)
    T = positive("batch_time_s", batch_time_s)
    s = count("capacity", capacity)
    if rule not in ("greedy", "bus"):
        raise ValueError(f"rule must be 'greedy' or 'bus', got {rule!r}")
    mu = lam * T
    if mu >= s:
        raise ValueError(f"unstable: λT = {mu:.4g} must be below the capacity K = {s}")
    z = bailey_roots(mu, s)
    eq = mu + float(np.real(np.sum(1.0 / (1.0 - z)))) - (s * (s - 1) - mu * mu) / (2.0 * (s - mu))
    p0 = float(np.real((s - mu) * np.prod(-z / (1.0 - z)))) if z.size else (s - mu)
    if rule == "bus":
        wait = (eq - mu / 2.0) / lam
    else:
        wait = ((eq - mu) * T + lam * T * T / 2.0) / (T + p0 / lam) / lam  # L̄q / λ
    return BaileyResult(lam, T, s, rule, eq, p0, wait, z)


def lambert_w(x: float) -> float:
    """Principal branch W(x) for x >= 0 (w·e^w = x), by Halley's iteration."""
    x = non_negative("x", x)
    if x == 0:
        return 0.0
    w = math.log1p(x)
    for _ in range(100):
        ew = math.exp(w)
        f = w * ew - x
        w_new = w - f / (ew * (w + 1) - (w + 2) * f / (2 * w + 2))
        if abs(w_new - w) <= 1e-15 * (1 + abs(w_new)):
            return w_new
        w = w_new
    return w


def unbounded_latency(arrival_rate: float, a: float, b: float, p_idle: float) -> dict[str, float]:
    """Exact means of Inoue's model (no batch limit, t(x) = a + b·x s) given p₀ = P(no arrival in
    an execution): from X' = A + 1{A = 0}, E[X](1 − λb) = λa + p₀,
    E[X²](1 − λ²b²) = λa + λ²a² + p₀ + (λb + 2λ²ab)E[X], E[D] = (λE[S²]/2 + E[X·S]) / E[X] with
    S = a + bX. Returns ``batch_mean``, ``batch_m2`` (E[X²]), ``latency_s`` and ``wait_s``.
    """
    lam = positive("arrival_rate", arrival_rate)
    a = non_negative("a", a)
    b = non_negative("b", b)
    p0 = non_negative("p_idle", p_idle)
    if p0 > 1:
        raise ValueError(f"p_idle must lie in [0, 1], got {p_idle!r}")
    if lam * b >= 1:
        raise ValueError(f"unstable: λ·b = {lam * b:.4g} must be < 1")
    m1 = (lam * a + p0) / (1 - lam * b)
    m2 = (lam * a + lam ** 2 * a ** 2 + p0 + (lam * b + 2 * lam ** 2 * a * b) * m1) / (1 - lam ** 2 * b ** 2)
    es2 = b * b * m2 + 2 * a * b * m1 + a * a
    exs = b * m2 + a * m1
    lat = (lam * es2 / 2 + exs) / m1
    return {"batch_mean": m1, "batch_m2": m2, "latency_s": lat, "wait_s": lat - exs / m1}


def unbounded_latency_bound(arrival_rate: float, a: float, b: float) -> dict[str, float]:
    """Upper bound on the mean latency of Inoue's model (our bound): E[D] falls with p₀, and
    p₀ ≥ p* = W(kC)/k (Jensen; k = λb/(1 − λb), C = e^{−λa/(1−λb)}; p* = e^{−λa}, exact, when
    b = 0). Returns `unbounded_latency` at p*, plus ``p_star``.
    """
    lam = positive("arrival_rate", arrival_rate)
    a = non_negative("a", a)
    b = non_negative("b", b)
    if lam * b >= 1:
        raise ValueError(f"unstable: λ·b = {lam * b:.4g} must be < 1")
    c = math.exp(-lam * a / (1 - lam * b))
    kk = lam * b / (1 - lam * b)
    p_star = c if kk == 0 else lambert_w(kk * c) / kk
    out = unbounded_latency(lam, a, b, p_star)
    out["p_star"] = p_star
    return out
