"""Drafts for speculative decoding on the toy LM: who proposes the k tokens the target verifies
(the acceptance rule is `batchlab.batching.speculative.accept`; `ContinuousBatcher` runs both).

* `BigramDraft` — the LM's own bigram prior: the LM adds a bigram log-prior counted from the
  article to every logit, so the prior's most likely successor is a free draft (no second model,
  no forward pass): a draft model that is nearly free and often right.
* `NgramDraft` — vLLM's ``ngram`` method (prompt lookup decoding): the longest n-gram that ends the
  sequence and occurred earlier in it (prompt and output) proposes the tokens that followed it.
  Nothing to run either; it shines where output repeats its context (the toy LM's greedy output
  falls into loops). With the bigram prior as its fallback ("ngram_bigram"), every step has k.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from batchlab._validate import count
from batchlab.lm.model import ToyLM


class Draft(Protocol):
    """A proposer: up to `k` draft tokens to follow `token_ids` (prompt and output so far)."""

    def propose(self, token_ids: Sequence[int], k: int) -> list[int]:
        """The draft tokens, in order (fewer than `k`, or none, when it has no guess)."""


class BigramDraft:
    """Draft token j + 1 is the bigram prior's argmax after draft token j (after the last real
    token for the first): a chain of k table look-ups."""

    def __init__(self, lm: ToyLM) -> None:
        self.successor = np.argmax(lm.prior, axis=1)  # the article's most frequent next character

    def propose(self, token_ids: Sequence[int], k: int) -> list[int]:
        """k tokens along the prior's most likely chain."""
        out, token = [], int(token_ids[-1])
        for _ in range(k):
            token = int(self.successor[token])
            out.append(token)
        return out


class NgramDraft:
    """Prompt lookup (vLLM ``ngram``, ``prompt_lookup_min`` / ``prompt_lookup_max``): the longest
    n-gram, min_n <= n <= max_n, that ends the tokens and also occurs earlier; its earliest
    occurrence proposes the (up to) k tokens after it. No match: no draft (a plain decode step),
    unless a `fallback` draft continues where the lookup stops (up to k tokens in all)."""

    def __init__(self, min_n: int = 2, max_n: int = 4, fallback: Draft | None = None) -> None:
        self.min_n, self.max_n = count("prompt_lookup_min", min_n), count("prompt_lookup_max", max_n)
        if self.min_n > self.max_n:
            raise ValueError(f"prompt_lookup_min {min_n} is larger than prompt_lookup_max {max_n}")
        self.fallback = fallback

    def propose(self, token_ids: Sequence[int], k: int) -> list[int]:
        """The tokens that followed the longest earlier match of the tokens' last n-gram (then the
        fallback's, if any, up to k)."""
        found = self._lookup(np.asarray(token_ids, dtype=np.int64), k)
        if self.fallback is None or len(found) >= k:
            return found
        return found + self.fallback.propose(list(token_ids) + found, k - len(found))

    def _lookup(self, tokens: np.ndarray, k: int) -> list[int]:
        for n in range(min(self.max_n, tokens.size - 1), self.min_n - 1, -1):
            windows = np.lib.stride_tricks.sliding_window_view(tokens[:-1], n)  # all but the suffix itself
            hits = np.flatnonzero((windows == tokens[-n:]).all(axis=1))
            if hits.size:
                start = int(hits[0]) + n
                return tokens[start:start + k].tolist()
        return []


#: `lm_stream`'s ``speculative_method`` values and the drafts they build (besides "off"):
#: "ngram_bigram" looks the suffix up first and lets the bigram prior finish the k tokens.
DRAFTS = ("bigram", "ngram", "ngram_bigram")


def make_draft(method: str, lm: ToyLM, prompt_lookup_min: int = 2, prompt_lookup_max: int = 4) -> Draft:
    """The draft `method` names (one of `DRAFTS`)."""
    if method not in DRAFTS:
        raise ValueError(f"speculative method must be one of {DRAFTS}, got {method!r}")
    if method == "bigram":
        return BigramDraft(lm)
    fallback = BigramDraft(lm) if method == "ngram_bigram" else None
    return NgramDraft(prompt_lookup_min, prompt_lookup_max, fallback)
