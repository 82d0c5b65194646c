"""Generation on `ToyLM`: one sequence's state, a batched `step` (every course model generates
through it), solo and static batches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence as Seq

import numpy as np

from batchlab._validate import non_negative
from batchlab.batching.speculative import accept
from batchlab.lm.kvcache import KVCache
from batchlab.lm.model import ToyLM
from batchlab.lm.sampling import greedy, make_rng, sample
from batchlab.lm.vocab import EOS_ID, PAD_ID


def check_prompt(prompt, vocab_size: int, max_len: int) -> np.ndarray:
    """A prompt of token ids as 1-D int32; ValueError if not 1-D, empty, not integers, outside
    the vocabulary, holding ``<pad>`` or longer than `max_len`."""
    arr = np.asarray(prompt)
    if arr.ndim != 1:
        raise ValueError(f"prompt must be a 1-D array of token ids, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError("prompt is empty: send at least one token id")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"prompt token ids must be integers, got dtype {arr.dtype}")
    if arr.size > max_len:
        raise ValueError(f"prompt has {arr.size} tokens, the limit is {max_len}")
    bad = (arr < 0) | (arr >= vocab_size)
    if bad.any():
        raise ValueError(f"prompt token id {int(arr[bad][0])} is outside the vocabulary "
                         f"[0, {vocab_size})")
    if (arr == PAD_ID).any():
        raise ValueError("prompt contains <pad> (id 0)")
    return arr.astype(np.int32)


class Sequence:
    """One generation in progress: prompt, KV cache (allocated at its first step), tokens and
    sampling state; it stops at ``<eos>`` (unless `ignore_eos`) or after `max_tokens` tokens."""

    __slots__ = ("seq_id", "prompt", "max_tokens", "temperature", "seed", "ignore_eos",
                 "cache", "tokens", "finish_reason", "_rng", "_released")

    def __init__(self, lm: ToyLM, prompt, max_tokens: int, temperature: float = 0.0,
                 seed: int = 0, ignore_eos: bool = False, seq_id=None) -> None:
        cfg = lm.config
        self.prompt = check_prompt(prompt, cfg.vocab_size, cfg.max_seq_len)
        max_tokens = int(max_tokens)
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if self.prompt.size + max_tokens > cfg.max_seq_len:
            raise ValueError(f"prompt ({self.prompt.size}) + max_tokens ({max_tokens}) exceeds "
                             f"max_seq_len {cfg.max_seq_len}")
        self.seq_id = seq_id
        self.max_tokens = max_tokens
        self.temperature = non_negative("temperature", temperature)
        self.seed = int(seed)
        self._rng = make_rng(self.seed)
        self.ignore_eos = bool(ignore_eos)
        self.cache = None
        self._released = False
        self.tokens: list[int] = []
        self.finish_reason: str | None = None

    @property
    def done(self) -> bool:
        """True once ``<eos>``, `max_tokens` or a cancel ended the sequence."""
        return self.finish_reason is not None

    @property
    def reserved_tokens(self) -> int:
        """KV tokens this sequence may come to hold: prompt + max_tokens."""
        return int(self.prompt.size) + self.max_tokens

    def pending(self, n: int | None = None) -> np.ndarray:
        """The next `n` (None: all) positions of prompt + generated tokens its cache does not hold."""
        at, p = self.cache.length if self.cache is not None else 0, int(self.prompt.size)
        end = p + len(self.tokens) if n is None else at + n
        generated = self.tokens[max(at - p, 0):max(end - p, 0)]
        return np.concatenate([self.prompt[at:end], np.asarray(generated, dtype=np.int32)])

    def accept(self, logits: np.ndarray) -> int:
        """Pick the next token from this sequence's logits row and update the finish state."""
        if self.done:
            raise ValueError("sequence already finished")
        return self.take(sample(logits, self.temperature, self._rng))

    def take(self, token: int) -> int:
        """Append `token` (chosen outside, e.g. a verified draft token) and update the finish state."""
        if self.done:
            raise ValueError("sequence already finished")
        self.tokens.append(token)
        if token == EOS_ID and not self.ignore_eos:
            self.finish_reason = "eos"
        elif len(self.tokens) >= self.max_tokens:
            self.finish_reason = "length"
        return token

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the sequence and drop its KV cache."""
        if self.finish_reason is None:
            self.finish_reason = reason
        self.release()

    def release(self) -> None:
        """Free the KV cache memory (the sequence can no longer step)."""
        self.cache = None
        self._released = True

    def ensure_cache(self, lm: ToyLM) -> KVCache:
        """The KV cache, allocated on first use; ValueError once released."""
        if self._released:
            raise ValueError(f"sequence {self.seq_id!r} was released and cannot step")
        if self.cache is None:
            self.cache = lm.new_cache(int(self.prompt.size))
        return self.cache


def step(lm: ToyLM, seqs: Seq[Sequence]) -> list[int]:
    """One model execution: prefill the new sequences, decode the others; the tokens they picked."""
    return step_chunks(lm, seqs, [s.pending().size for s in seqs])


#: An acceptance rule: (draft tokens, the target's argmax after each verified position) ->
#: (accepted, next_token), as `batching.speculative.accept`.
AcceptRule = Callable[[list[int], list[int]], tuple[int, int]]


def step_chunks(lm: ToyLM, seqs: Seq[Sequence], sizes: Seq[int],
                drafts: Seq[Seq[int]] | None = None, rule: AcceptRule = accept) -> list[int | None | list[int]]:
    """One model execution in which sequence i computes its next `sizes[i]` positions of prompt +
    generated tokens (a prefill chunk, a recomputation, or 1 to decode); each whose input is then
    all computed picks its next token, the others (a prompt part-way) give None. A decoding
    sequence with `drafts[i]` (speculative decoding, greedy only) computes its last token and the
    draft tokens (``sizes[i] == 1 + len(drafts[i])``) and gives the list of tokens it keeps
    (`verify` with the acceptance `rule`)."""
    drafts = [list(d) for d in drafts] if drafts is not None else [[] for _ in seqs]
    chunks = []
    for s, n, draft in zip(seqs, sizes, drafts, strict=True):
        if s.done:
            raise ValueError(f"sequence {s.seq_id!r} is finished and cannot step")
        if draft and (s.temperature != 0.0 or n != 1 + len(draft) or s.cache is None):
            raise ValueError(f"sequence {s.seq_id!r}: draft tokens need a greedy decode of 1 + {len(draft)} "
                             f"positions, got {n}")
        s.ensure_cache(lm)
        chunks.append(np.concatenate([s.pending(n - len(draft)), np.asarray(draft, dtype=np.int32)]))
    every = [bool(d) for d in drafts]  # a draft needs the logits after each of its positions
    logits = lm.forward([s.cache for s in seqs], chunks, every_position=every if any(every) else False)
    out: list[int | None | list[int]] = []
    first = 0
    for s, draft in zip(seqs, drafts):
        rows, first = logits[first:first + 1 + len(draft)], first + 1 + len(draft)
        if draft:
            out.append(verify(s, draft, rows, rule))
        else:
            out.append(s.accept(rows[0]) if s.cache.length == s.prompt.size + len(s.tokens) else None)
    return out


def verify(seq: Sequence, draft: Seq[int], rows: np.ndarray, rule: AcceptRule = accept) -> list[int]:
    """After a step that scored `seq`'s last token and its `draft` (`rows`: the logits after each of
    those positions): the acceptance `rule` (greedy: `batching.speculative.accept`) says how many
    draft tokens to keep and the next token; the sequence takes them (stopping early at <eos> or
    max_tokens) and its cache forgets the positions past the ones it keeps. ValueError if the rule
    answers something else than (0 … len(draft), a token id)."""
    draft = [int(t) for t in draft]
    answer = rule(list(draft), [greedy(row) for row in rows])
    try:
        accepted, token = answer
        if int(accepted) != accepted or int(token) != token:
            raise TypeError
        accepted, token = int(accepted), int(token)
    except (TypeError, ValueError):
        raise ValueError(f"the acceptance rule must return (accepted, next_token), two ints; got {answer!r}"[:300]) from None
    if not 0 <= accepted <= len(draft) or not 0 <= token < rows.shape[-1]:
        raise ValueError(f"the acceptance rule returned ({accepted}, {token}) for {len(draft)} draft tokens: "
                         f"accepted must be 0 … {len(draft)} and next_token a token id")
    kept = []
    for t in draft[:accepted] + [token]:
        kept.append(seq.take(t))
        if seq.done:
            break
    seq.cache.truncate(seq.cache.length - len(draft) + len(kept) - 1)
    return kept


def generate(lm: ToyLM, prompt, max_tokens: int, temperature: float = 0.0, seed: int = 0,
             ignore_eos: bool = False) -> list[int]:
    """Generate alone (batch of one): the reference every batched path must reproduce."""
    seq = Sequence(lm, prompt, max_tokens, temperature, seed, ignore_eos)
    while not seq.done:
        step(lm, [seq])
    seq.release()
    return seq.tokens


@dataclass(frozen=True)
class StaticBatchResult:
    """What a static batch did: each row's tokens and the `steps` executions it took."""

    tokens: list[list[int]]
    steps: int


def generate_static_batch(lm: ToyLM, seqs: Seq[Sequence]) -> StaticBatchResult:
    """Decode a whole batch until its longest member finishes (request-level batching); finished
    rows keep their place, computed and discarded: the padding the article's η measures."""
    seqs = list(seqs)
    steps = 0
    max_len = lm.config.max_seq_len
    while any(not s.done for s in seqs):
        rows = [s for s in seqs if not s.done or (s.cache is not None and
                                                  s.cache.length < max_len)]
        caches = [s.ensure_cache(lm) for s in rows]
        chunks = [s.pending() for s in rows]  # a finished row feeds its last token again
        lengths = [c.length for c in caches]
        logits = lm.forward(caches, chunks)
        for s, row, n in zip(rows, logits, lengths):
            if s.done:
                s.cache.truncate(n)  # padding: computed, then discarded
            else:
                s.accept(row)
        steps += 1
    for s in seqs:
        s.release()
    return StaticBatchResult([list(s.tokens) for s in seqs], steps)
