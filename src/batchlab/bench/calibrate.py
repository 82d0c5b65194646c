"""From the server's batch statistics to a service-time model the simulator can use.

`batch_stats` gives, per executed batch size b, how many executions ran and their total
compute_input / compute_infer / compute_output times. Their sum per execution is the time the
instance was busy with one batch of b: the simulator's t(b). Sizes seen only a few times are
noisy; a weighted isotonic fit (the batch time never falls as b grows) smooths them without
assuming a shape, and a weighted least-squares line t(b) = base + per_item · b summarises them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from batchlab.load.stats import BATCH_PHASES, ModelStats


def batch_table(stats: ModelStats, min_count: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sizes, mean busy ms per execution, executions) for sizes executed at least `min_count` times."""
    sizes, ms, counts = [], [], []
    for b, slot in sorted(stats.batches.items()):
        c = slot.get("compute_infer", (0, 0))[0]
        if c >= min_count:
            sizes.append(b)
            ms.append(sum(slot.get(p, (0, 0))[1] for p in BATCH_PHASES) / c / 1e6)
            counts.append(c)
    if not sizes:
        raise ValueError(f"no batch size was executed {min_count} times or more: nothing to calibrate from")
    return np.array(sizes), np.array(ms), np.array(counts, dtype=float)


def isotonic(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted least-squares non-decreasing fit of `y` (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [value, weight, length]
    for yi, wi in zip(y.tolist(), w.tolist()):
        blocks.append([yi, wi, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, w2, n2 = blocks.pop()
            v1, w1, n1 = blocks.pop()
            blocks.append([(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    return np.concatenate([[v] * n for v, _, n in blocks])


def fit_affine(sizes: np.ndarray, ms: np.ndarray, counts: np.ndarray) -> tuple[float, float]:
    """Weighted least squares t(b) = base + per_item · b (ms); both clipped at >= 0."""
    if len(sizes) == 1:
        return float(ms[0]), 0.0
    w = np.sqrt(counts)
    A = np.vstack([np.ones_like(sizes, dtype=float), sizes.astype(float)]).T * w[:, None]
    base, per = np.linalg.lstsq(A, ms * w, rcond=None)[0]
    return max(float(base), 0.0), max(float(per), 0.0)


def service_model(stats: ModelStats, min_count: int = 3) -> dict[str, Any]:
    """The calibrated service time: smoothed table, affine summary, and the raw points."""
    sizes, ms, counts = batch_table(stats, min_count)
    smooth = isotonic(ms, counts)
    base, per = fit_affine(sizes, ms, counts)
    return {"sizes": sizes, "raw_ms": ms, "counts": counts, "smooth_ms": smooth,
            "affine_ms": (base, per)}


def speedup_ceiling(model: dict[str, Any], t1_ms: float, max_b: int = 16) -> dict[str, float] | None:
    """Best b · t(1) / t(b) over b <= max_b on the smoothed table: what batching can give at most."""
    sizes, smooth = model["sizes"], model["smooth_ms"]
    keep = sizes <= max_b
    if not keep.any() or t1_ms <= 0:
        return None
    gain = sizes[keep] * t1_ms / smooth[keep]
    k = int(np.argmax(gain))
    return {"speedup": float(gain[k]), "at_batch": int(sizes[keep][k]), "t1_ms": float(t1_ms),
            "t_b_ms": float(smooth[keep][k])}
