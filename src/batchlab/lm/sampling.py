"""Greedy and seeded sampling of the next token from one row of logits."""

from __future__ import annotations

import numpy as np

from batchlab._validate import non_negative


def greedy(logits: np.ndarray) -> int:
    """Index of the largest logit (the first one on an exact tie)."""
    logits = np.asarray(logits)
    if logits.ndim != 1 or logits.size == 0:
        raise ValueError(f"greedy() takes one non-empty row of logits, got shape {logits.shape}")
    return int(np.argmax(logits))


def sample(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """A token from softmax(logits / temperature) with one uniform from this sequence's `rng`
    (float64; greedy at temperature 0), so it does not depend on the rest of the batch."""
    temperature = non_negative("temperature", temperature)
    if temperature == 0.0:
        return greedy(logits)
    z = np.asarray(logits, dtype=np.float64) / temperature
    z -= z.max()
    p = np.exp(z)
    cdf = np.cumsum(p)
    u = rng.random() * cdf[-1]
    return int(min(np.searchsorted(cdf, u, side="right"), cdf.size - 1))


def make_rng(seed: int) -> np.random.Generator:
    """The per-sequence generator used by every course model for `seed`."""
    seed = int(seed)
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    return np.random.default_rng(seed)
