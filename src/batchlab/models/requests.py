"""Request inputs for the course models as {name: numpy array}, with the right shapes and dtypes.

Batched models take a leading batch dimension of 1 per request; `lm_stream` (max_batch_size 0)
takes none. A prompt is text (encoded with a leading <bos>) or token ids.
"""

from __future__ import annotations

from typing import Sequence as Seq

import numpy as np

from batchlab._validate import count
from batchlab.lm.vocab import VOCAB_SIZE, encode


def prompt_ids(prompt: str | Seq[int] | np.ndarray) -> np.ndarray:
    """Token ids (int32) of a prompt given as text or ids."""
    if isinstance(prompt, str):
        return encode(prompt)
    ids = np.asarray(prompt)
    if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
        raise ValueError(f"a prompt is text or a 1-D sequence of token ids, got shape "
                         f"{ids.shape} dtype {ids.dtype}")
    return ids.astype(np.int32)


def random_embed_inputs(rows: int = 1, length: int = 16, seed: int = 0, low: int = 4,
                        high: int = VOCAB_SIZE) -> dict[str, np.ndarray]:
    """{"TOKENS": int32 [rows, length]}: ids uniform on [low, high) from `default_rng(seed)`, for the
    `embed` models (by default every character, no special token)."""
    count("rows", rows)
    count("length", length)
    if not 0 <= low < high <= VOCAB_SIZE:
        raise ValueError(f"token ids must lie in 0 <= low < high <= {VOCAB_SIZE}, got [{low}, {high})")
    tokens = np.random.default_rng(seed).integers(low, high, size=(int(rows), int(length)))
    return {"TOKENS": tokens.astype(np.int32)}


def random_decode_inputs(rows: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    """{"TOKEN": int32 [rows, 1]}: one uniform character id per row, for the `decode` models."""
    count("rows", rows)
    tokens = np.random.default_rng(seed).integers(4, VOCAB_SIZE, size=(int(rows), 1))
    return {"TOKEN": tokens.astype(np.int32)}


def generate_inputs(prompt: str | Seq[int] | np.ndarray, max_tokens: int,
                    temperature: float | None = None, seed: int | None = None,
                    ignore_eos: bool | None = None, batched: bool = True, rows: int = 1
                    ) -> dict[str, np.ndarray]:
    """Inputs of `generate` / `lm_iterative` (batched) or `lm_stream` (`batched=False`); optional ones
    only when given; ``rows`` > 1 repeats the prompt in one batched request."""
    ids = prompt_ids(prompt)
    if ids.size == 0:
        raise ValueError("a generate prompt holds at least one token")
    count("max_tokens", max_tokens)
    n = count("rows", rows)
    if n > 1 and not batched:
        raise ValueError(f"rows must be 1 when unbatched, got {rows!r}")

    def col(value, dtype):
        return np.full((n, 1), value, dtype=dtype) if batched else np.array([value], dtype=dtype)

    out = {"PROMPT": np.tile(ids[None], (n, 1)) if batched else ids, "MAX_TOKENS": col(int(max_tokens), np.int32)}
    if temperature is not None:
        out["TEMPERATURE"] = col(float(temperature), np.float32)
    if seed is not None:
        out["SEED"] = col(int(seed), np.int64)
    if ignore_eos is not None:
        out["IGNORE_EOS"] = col(bool(ignore_eos), np.bool_)
    return out
