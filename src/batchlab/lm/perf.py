"""Measure the LM's decode-step time t(B) (`batchlab.theory.formulas.fit_affine` fits t(B) = a + b·B)."""

from __future__ import annotations

import time
from typing import Iterable

import numpy as np

from batchlab.lm.model import ToyLM

DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)


def decode_step_times(lm: ToyLM, batch_sizes: Iterable[int] = DEFAULT_BATCH_SIZES,
                      context: int = 32, repeats: int = 20, seed: int = 0
                      ) -> dict[int, float]:
    """Median seconds of one decode step of B sequences holding `context` tokens, per B (each step
    rolled back; sizes timed round-robin so outside load hits all alike)."""
    sizes = [int(b) for b in batch_sizes]
    if not sizes or min(sizes) < 1:
        raise ValueError(f"batch sizes must be positive ints, got {sizes}")
    if not 1 <= context < lm.config.max_seq_len:
        raise ValueError(f"context must lie in [1, {lm.config.max_seq_len}), got {context}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    rng = np.random.default_rng(seed)
    batches = {}
    for b in sizes:
        caches = [lm.new_cache(context + 1) for _ in range(b)]
        lm.forward(caches, [rng.integers(4, lm.config.vocab_size, context) for _ in range(b)])
        batches[b] = (caches, rng.integers(4, lm.config.vocab_size, b))
    times: dict[int, list[float]] = {b: [] for b in sizes}
    for r in range(repeats + 2):
        for b in sizes:
            caches, tokens = batches[b]
            t0 = time.perf_counter()
            lm.decode_step(caches, tokens)
            dt = time.perf_counter() - t0
            for c in caches:
                c.truncate(context)
            if r >= 2:  # two warm-up rounds
                times[b].append(dt)
    return {b: float(np.median(times[b])) for b in sizes}
