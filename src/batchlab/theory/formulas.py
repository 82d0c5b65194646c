"""The article's six formulas, the affine batch-time model and the queueing results the chapters
check them against. Symbols follow the article: B batch size, t_single / t_batch times, L_i
sequence lengths, f parallel fraction, C_GPU cost per hour, ρ = λ/μ utilisation.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from batchlab._validate import positive


def t_total(t_queue: float, t_prefill: float, t_decode: float, t_overhead: float) -> float:
    """T_total = T_queue + T_prefill + T_decode + T_overhead (chapter 01)."""
    return t_queue + t_prefill + t_decode + t_overhead


def speedup(batch_size: float, t_single: float, t_batch: float) -> float:
    """S = B · t_single / t_batch (chapter 02)."""
    if t_batch <= 0 or t_single <= 0 or batch_size <= 0:
        raise ValueError("batch_size, t_single and t_batch must be positive")
    return batch_size * t_single / t_batch


def padding_efficiency(lengths: Sequence[float]) -> float:
    """η = Σ L_i / (B · L_max): useful token-steps over padded token-steps (chapter 03)."""
    arr = np.asarray(lengths, dtype=float)
    if arr.size == 0 or np.any(arr <= 0):
        raise ValueError("lengths must be a non-empty sequence of positive numbers")
    return float(arr.sum() / (arr.size * arr.max()))


def heavy_load_wait(n_queue: float, t_batch: float, batch_size: float) -> float:
    """The article's T̄_wait = N_queue · T_batch / B_size (chapter 04): heavy load (full batches,
    one instance); at light load `max_queue_delay` and the arrival rate set the wait."""
    positive("batch_size", batch_size)
    return n_queue * t_batch / batch_size


def amdahl(f: float, batch_size: float) -> float:
    """S_p = 1 / ((1 − f) + f / B) (chapter 05)."""
    if not 0 <= f <= 1:
        raise ValueError("f must lie in [0, 1]")
    positive("batch_size", batch_size)
    return 1.0 / ((1.0 - f) + f / batch_size)


def amdahl_ceiling(f: float) -> float:
    """lim_{B→∞} S_p = 1 / (1 − f)."""
    return float("inf") if f >= 1 else 1.0 / (1.0 - f)


def cost_per_request(c_gpu_per_hour: float, t_busy_s: float, n_requests: float) -> float:
    """Cost_per = C_GPU · T_busy / N_req, with C_GPU per hour and T_busy in seconds (chapter 06)."""
    positive("n_requests", n_requests)
    return c_gpu_per_hour * (t_busy_s / 3600.0) / n_requests


def cost_per_million_tokens(c_gpu_per_hour: float, tokens_per_s: float, utilization: float = 1.0) -> float:
    """Price of a million generated tokens at a sustained `tokens_per_s` and GPU `utilization`."""
    if tokens_per_s <= 0 or not 0 < utilization <= 1:
        raise ValueError("tokens_per_s must be positive and utilization in (0, 1]")
    return c_gpu_per_hour / 3600.0 / (tokens_per_s * utilization) * 1e6


def affine_batch_time(batch_size: float | np.ndarray, a: float, b: float) -> float | np.ndarray:
    """t(B) = a + b · B: a fixed cost per execution plus a cost per batch item."""
    return a + b * np.asarray(batch_size, dtype=float) if np.ndim(batch_size) else a + b * batch_size


def affine_speedup(batch_size: float | np.ndarray, a: float, b: float) -> float | np.ndarray:
    """S(B) for t(B) = a + b·B: B(a + b) / (a + b·B), which tends to (a + b)/b."""
    bs = np.asarray(batch_size, dtype=float)
    out = bs * (a + b) / (a + b * bs)
    return float(out) if np.ndim(out) == 0 else out


def amdahl_f_from_affine(a: float, b: float) -> float:
    """The Amdahl fraction f that makes S_p(B) the affine speedup: f = a / (a + b).

    1/S(B) = (a + b·B) / (B(a + b)) = b/(a + b) + [a/(a + b)]/B is Amdahl's (1 − f) + f/B: the
    "parallel" part is the cost the batch shares (a), and the ceiling 1/(1 − f) = (a + b)/b.
    """
    if a < 0 or b <= 0:
        raise ValueError("need a >= 0 and b > 0")
    return a / (a + b)


def fit_affine(batch_sizes: Sequence[float], times: Sequence[float], *, weights: Sequence[float] | None = None,
               nonneg: bool = False) -> tuple[float, float]:
    """Least-squares (a, b) of t(B) = a + b·B, `weights` on the squared residuals; with `nonneg` a
    fit with a < 0 is redone through the origin and b is kept >= 0."""
    x = np.asarray(batch_sizes, dtype=float)
    y = np.asarray(times, dtype=float)
    w = np.sqrt(np.ones_like(x) if weights is None else np.asarray(weights, dtype=float))
    if x.size < 2 or x.size != y.size or w.shape != x.shape:
        raise ValueError("need at least two (batch size, time) pairs of equal length")
    A = np.vstack([np.ones_like(x), x]).T
    a, b = np.linalg.lstsq(A * w[:, None], y * w, rcond=None)[0]
    if nonneg and a < 0:
        a, b = 0.0, float(np.dot(w * x, w * y) / np.dot(w * x, w * x))
    if nonneg:
        b = max(float(b), 0.0)
    return float(a), float(b)


def relative_error(value: float, reference: float) -> float:
    """(value − reference) / reference; NaN when the reference is 0."""
    return (value - reference) / reference if reference else math.nan


def fit_amdahl_f(batch_sizes: Sequence[float], speedups: Sequence[float]) -> float:
    """Least-squares f for S_p(B) = 1/((1−f) + f/B): linear in 1/S = 1 − f(1 − 1/B)."""
    x = 1.0 - 1.0 / np.asarray(batch_sizes, dtype=float)
    y = 1.0 - 1.0 / np.asarray(speedups, dtype=float)
    denom = float(np.dot(x, x))
    if denom == 0:
        raise ValueError("need at least one batch size > 1")
    return float(np.clip(np.dot(x, y) / denom, 0.0, 1.0))


def md1_wait(arrival_rate: float, service_time: float) -> float:
    """M/D/1 mean wait in queue: Wq = ρ / (2μ(1 − ρ)), with μ = 1/service_time."""
    rho = arrival_rate * service_time
    if not 0 <= rho < 1:
        raise ValueError(f"unstable: ρ = {rho:.3f} must be < 1")
    mu = 1.0 / service_time
    return rho / (2 * mu * (1 - rho))


def littles_law_l(arrival_rate: float, mean_time_in_system: float) -> float:
    """Little's law: L = λ W (requests in the system at once)."""
    if arrival_rate < 0 or mean_time_in_system < 0:
        raise ValueError("arrival_rate and mean_time_in_system must be >= 0")
    return arrival_rate * mean_time_in_system


def batch_capacity(a: float, b: float, batch_size: float, instances: int = 1) -> float:
    """Largest sustainable request rate with full batches of `batch_size`: K·B / (a + b·B)."""
    return instances * batch_size / (a + b * batch_size)


def instances_needed(rate_per_s: float, batch: int, t_batch_s: float, busy: float = 1.0) -> int:
    """Instances that keep up with `rate_per_s` when each runs full batches of `batch` taking
    `t_batch_s`, kept busy a fraction `busy` of the time: ⌈λ·t_batch / (B·busy)⌉."""
    if batch < 1 or t_batch_s <= 0 or rate_per_s < 0 or not 0 < busy <= 1:
        raise ValueError("need batch >= 1, t_batch_s > 0, rate >= 0, busy in (0, 1]")
    return int(math.ceil(rate_per_s * t_batch_s / (batch * busy) - 1e-9))


def tpot(e2e_s: float, ttft_s: float, n_tokens: int) -> float:
    """Time per output token after the first: TPOT = (e2e − TTFT) / (n − 1), the mean of the n − 1
    gaps between a stream's tokens (ITL), since those gaps add up to e2e − TTFT."""
    if n_tokens < 2:
        raise ValueError(f"TPOT needs at least 2 tokens, got {n_tokens}")
    return (e2e_s - ttft_s) / (n_tokens - 1)


def prefill_steps(prompt_tokens: int, max_num_tokens: int, decoding: int = 0) -> int:
    """Steps a prompt's chunked prefill takes when each step computes at most `max_num_tokens`
    tokens and `decoding` of them go to sequences decoding one token each: ⌈P / (M − d)⌉."""
    room = max_num_tokens - decoding
    if prompt_tokens < 1 or room < 1:
        raise ValueError("need prompt_tokens >= 1 and max_num_tokens > decoding")
    return int(math.ceil(prompt_tokens / room))


def prefix_hit_tokens(shared_tokens: int, block_size: int, prompt_tokens: int | None = None) -> int:
    """Prompt tokens a block-granular prefix cache serves: the whole blocks of the shared prefix,
    ⌊s / b⌋·b (and never the prompt's last token, which must be computed to sample from)."""
    if block_size < 1 or shared_tokens < 0:
        raise ValueError("need block_size >= 1 and shared_tokens >= 0")
    limit = shared_tokens if prompt_tokens is None else min(shared_tokens, prompt_tokens - 1)
    return limit // block_size * block_size


def speculative_tokens_per_step(alpha: float, k: int) -> float:
    """Expected tokens one verification step emits when a draft proposes `k` tokens and each is
    accepted with probability `alpha`, independently, while the ones before it were (Leviathan et
    al., ICML '23): 1 + α + … + α^k = (1 − α^(k+1)) / (1 − α) (k + 1 at α = 1)."""
    if not 0 <= alpha <= 1 or k < 0 or int(k) != k:
        raise ValueError(f"need 0 <= alpha <= 1 and an integer k >= 0, got alpha={alpha!r}, k={k!r}")
    return float(k + 1) if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
