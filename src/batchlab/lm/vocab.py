"""Character vocabulary of the toy LM and the bigram prior counted from the article.

Token ids: 0 ``<pad>``, 1 ``<bos>``, 2 ``<eos>``, 3 ``<unk>``, then every distinct character of
the source article (`ARTICLE`, read from article.txt) in code-point order.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Iterable

import numpy as np

#: The source article (「一口锅」: Triton 动态批处理与序列批处理), the toy LM's corpus.
ARTICLE: str = Path(__file__).with_name("article.txt").read_text(encoding="utf-8")

PAD_ID: int = 0
BOS_ID: int = 1
EOS_ID: int = 2
UNK_ID: int = 3
SPECIALS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<unk>")

CHARS: str = "".join(sorted(set(ARTICLE)))
VOCAB_SIZE: int = len(SPECIALS) + len(CHARS)

_CHAR_TO_ID: dict[str, int] = {c: i + len(SPECIALS) for i, c in enumerate(CHARS)}


def encode(text: str, bos: bool = True) -> np.ndarray:
    """Token ids (int32) of `text`, after ``<bos>`` if `bos`; unknown characters map to ``<unk>``."""
    if not isinstance(text, str):
        raise ValueError(f"encode() takes a str, got {type(text).__name__}")
    ids = [_CHAR_TO_ID.get(c, UNK_ID) for c in text]
    if bos:
        ids.insert(0, BOS_ID)
    return np.asarray(ids, dtype=np.int32)


def decode(ids: Iterable[int]) -> str:
    """Text of token ids: specials dropped, ``<unk>`` as U+FFFD; ValueError for ids outside the
    vocabulary."""
    out = []
    for i in ids:
        i = int(i)
        if not 0 <= i < VOCAB_SIZE:
            raise ValueError(f"token id {i} is outside the vocabulary [0, {VOCAB_SIZE})")
        if i >= len(SPECIALS):
            out.append(CHARS[i - len(SPECIALS)])
        elif i == UNK_ID:
            out.append("\ufffd")
    return "".join(out)


@lru_cache(maxsize=1)
def corpus_ids() -> np.ndarray:
    """The article as ids: each non-empty line (whitespace runs collapsed) as ``<bos>`` line ``<eos>``."""
    ids: list[int] = []
    for line in ARTICLE.splitlines():
        line = " ".join(line.split())
        if line:
            ids.extend(encode(line, bos=True).tolist())
            ids.append(EOS_ID)
    return np.asarray(ids, dtype=np.int32)


@lru_cache(maxsize=4)
def bigram_log_prior(smoothing: float = 0.1) -> np.ndarray:
    """log P(next | current) from the article, add-`smoothing`, float32 (V, V), read-only; ``<pad>``
    and ``<bos>`` columns are -inf (never generated)."""
    ids = corpus_ids()
    counts = np.zeros((VOCAB_SIZE, VOCAB_SIZE), dtype=np.float64)
    pairs = ids[:-1], ids[1:]
    keep = pairs[0] != EOS_ID
    np.add.at(counts, (pairs[0][keep], pairs[1][keep]), 1.0)
    counts += smoothing
    counts[:, [PAD_ID, BOS_ID]] = 0.0
    with np.errstate(divide="ignore"):
        prior = np.log(counts / counts.sum(axis=1, keepdims=True)).astype(np.float32)
    prior.setflags(write=False)
    return prior
