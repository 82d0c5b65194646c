"""A small decoder-only transformer in numpy float32 with a KV cache (contiguous or paged, `lm.kvcache`).

Seeded integer-valued weights; the logits add a bigram prior counted from the article. A batched
step reads the weights once, the cache grows by fixed bytes per token, and the model is batch
invariant: every matmul (weights, Q·Kᵀ, P·V) multiplies integer-valued float32 operands whose
partial sums stay below 2**24, so each sum is exact whatever order or split BLAS chooses. Keys
and values are int8-valued with a fixed scale; attention probabilities are multiples of 2**-16.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Sequence

import numpy as np

from batchlab.lm.config import LMConfig
from batchlab.lm.kvcache import KVCache
from batchlab.lm.vocab import PAD_ID, bigram_log_prior

_LN_EPS = np.float32(1e-5)
#: Keys and values are stored as integers in [-127, 127] times this fixed scale (clip at ±6;
#: their values have standard deviation ~1): an int8-style KV cache with a static scale.
KV_LEVELS = 127
KV_SCALE = np.float32(6.0 / KV_LEVELS)
#: Attention probabilities are rounded to multiples of 2**-16 before multiplying V.
PROB_LEVELS = np.float32(2.0**16)


class _QLinear:
    """Integer-valued float32 weight (in, out) with one scale; input quantised per row."""

    __slots__ = ("w", "scale", "act_levels", "always_gemm")

    def __init__(self, rng: np.random.Generator, fan_in: int, fan_out: int, levels: int,
                 act_levels: int, always_gemm: bool) -> None:
        spread = levels / 3.0
        w = rng.standard_normal((fan_in, fan_out), dtype=np.float32)
        w *= np.float32(spread)
        np.rint(w, out=w)
        np.clip(w, -levels, levels, out=w)
        self.w = w
        self.scale = np.float32(1.0 / (math.sqrt(fan_in) * spread))
        self.act_levels = np.float32(act_levels)
        self.always_gemm = always_gemm

    def __call__(self, x: np.ndarray) -> np.ndarray:
        # Per-row (per-token) symmetric quantisation: |xq| <= act_levels, integers.
        amax = np.max(np.abs(x), axis=1)
        row_scale = amax / self.act_levels
        row_scale[row_scale == 0] = np.float32(1.0)
        xq = x / row_scale[:, None]
        np.rint(xq, out=xq)
        n = xq.shape[0]
        if n == 1 and self.always_gemm:
            # numpy sends a single row to GEMV; pad to two rows to keep the GEMM kernel.
            acc = (np.concatenate([xq, np.zeros_like(xq)]) @ self.w)[:1]
        else:
            acc = xq @ self.w
        acc *= (row_scale * self.scale)[:, None]
        return acc


def _layer_norm(x: np.ndarray, gain: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(axis=-1, keepdims=True)
    xc /= np.sqrt(var + _LN_EPS)
    xc *= gain
    xc += bias
    return xc


def _gelu(x: np.ndarray) -> np.ndarray:
    c = np.float32(math.sqrt(2.0 / math.pi))
    inner = x * x
    inner *= np.float32(0.044715)
    inner += np.float32(1.0)
    inner *= x
    inner *= c
    np.tanh(inner, out=inner)
    inner += np.float32(1.0)
    inner *= x
    inner *= np.float32(0.5)
    return inner


_MAX = np.maximum.reduce
_SUM = np.add.reduce


def _quantize_kv(x: np.ndarray) -> np.ndarray:
    """Keys or values as integers in [-KV_LEVELS, KV_LEVELS] (float32), scale KV_SCALE."""
    q = x / KV_SCALE
    np.rint(q, out=q)
    np.clip(q, -KV_LEVELS, KV_LEVELS, out=q)
    return q


def _quantize_queries(q: np.ndarray, heads: int, head_dim: int, extra: np.float32
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Queries (N, heads·hd) as integers per (token, head), and the factor (N, heads) that
    turns integer dot products with quantised keys into scores (times `extra`)."""
    qh = q.reshape(q.shape[0], heads, head_dim)
    amax = _MAX(np.abs(qh), axis=-1)
    amax /= np.float32(KV_LEVELS)
    amax[amax == 0] = np.float32(1.0)
    qq = qh / amax[:, :, None]
    np.rint(qq, out=qq)
    amax *= KV_SCALE * extra
    return qq.reshape(q.shape), amax


def _rounded_probs(s: np.ndarray) -> np.ndarray:
    """softmax(s) over the last axis, in place, as integer multiples of 2**-16 (times 2**16). The sum
    is taken in float64, so a row's masked (zero) entries and the order BLAS or numpy add in cannot
    change it: a chunk, a prefix hit or a verified draft sees the very probabilities of a one-token
    step (chunk invariance, on top of batch invariance)."""
    s -= _MAX(s, axis=-1, keepdims=True)
    np.exp(s, out=s)
    s *= PROB_LEVELS / _SUM(s, axis=-1, keepdims=True, dtype=np.float64)
    np.rint(s, out=s)
    return s


def _probs_times_values(s: np.ndarray, v: np.ndarray) -> np.ndarray:
    """softmax(s) @ v, probabilities rounded to multiples of 2**-16: integer sums below 2**24, exact
    whatever BLAS's order (`s` scores masked with -inf, `v` integer values)."""
    out = np.matmul(_rounded_probs(s), v)
    out *= KV_SCALE / PROB_LEVELS
    return out


def _positions(max_len: int, d: int) -> np.ndarray:
    pos = np.arange(max_len, dtype=np.float64)[:, None]
    i = np.arange(d // 2, dtype=np.float64)[None, :]
    angle = pos / np.power(10000.0, 2.0 * i / d)
    table = np.zeros((max_len, d), dtype=np.float64)
    table[:, 0::2] = np.sin(angle)
    table[:, 1::2] = np.cos(angle)
    return table.astype(np.float32)


def _logit_rows(lengths: Sequence[int], every_position: bool | Sequence[bool]) -> np.ndarray:
    """Rows of the step's positions whose logits `forward` returns: each chunk's last, or all of
    those chunks `every_position` names (True: every chunk)."""
    ends = np.cumsum(lengths)
    if isinstance(every_position, (bool, np.bool_)):
        return np.arange(ends[-1]) if every_position else ends - 1
    if len(every_position) != len(lengths):
        raise ValueError(f"every_position names {len(every_position)} chunks, the step has {len(lengths)}")
    return np.concatenate([np.arange(end - n, end) if every else [end - 1]
                           for n, end, every in zip(lengths, ends, every_position)]).astype(np.int64)


def _check_ids(tokens: np.ndarray, vocab_size: int) -> None:
    """ValueError unless `tokens` are integer ids within the vocabulary."""
    if not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"token ids must be integers, got dtype {tokens.dtype}")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(f"token ids must lie in the vocabulary [0, {vocab_size})")


class _Layer:
    __slots__ = ("ln1_g", "ln1_b", "qkv", "proj", "ln2_g", "ln2_b", "up", "down")


class ToyLM:
    """The course LM; `ToyLM.default()` is the instance shared in a process. Thread-safe for
    distinct caches."""

    _default: "ToyLM | None" = None
    _default_lock = threading.Lock()

    def __init__(self, config: LMConfig | None = None) -> None:
        cfg = config if config is not None else LMConfig()
        if not isinstance(cfg, LMConfig):
            raise ValueError(f"config must be an LMConfig, got {type(cfg).__name__}")
        self.config = cfg
        rng = np.random.default_rng(cfg.seed)
        d, hd = cfg.d_model, cfg.head_dim
        qkv_out = (cfg.n_heads + 2 * cfg.n_kv_heads) * hd
        lin = dict(levels=cfg.weight_levels, act_levels=cfg.act_levels,
                   always_gemm=cfg.always_gemm)
        self.tok_emb = rng.standard_normal((cfg.vocab_size, d), dtype=np.float32)
        self.pos_emb = _positions(cfg.max_seq_len, d)
        self.layers: list[_Layer] = []
        for _ in range(cfg.n_layers):
            layer = _Layer()
            layer.ln1_g = np.ones(d, dtype=np.float32)
            layer.ln1_b = np.zeros(d, dtype=np.float32)
            layer.qkv = _QLinear(rng, d, qkv_out, **lin)
            layer.proj = _QLinear(rng, cfg.n_heads * hd, d, **lin)
            layer.ln2_g = np.ones(d, dtype=np.float32)
            layer.ln2_b = np.zeros(d, dtype=np.float32)
            layer.up = _QLinear(rng, d, cfg.d_ff, **lin)
            layer.down = _QLinear(rng, cfg.d_ff, d, **lin)
            self.layers.append(layer)
        self.lnf_g = np.ones(d, dtype=np.float32)
        self.lnf_b = np.zeros(d, dtype=np.float32)
        self.head = _QLinear(rng, d, cfg.vocab_size, **lin)
        self.prior = bigram_log_prior(cfg.prior_smoothing)
        self._attn_scale = np.float32(1.0 / math.sqrt(hd))
        self._ctx_w = np.float32(cfg.context_weight)
        self._prior_w = np.float32(cfg.prior_weight)

    @classmethod
    def default(cls) -> "ToyLM":
        """The shared default-config LM of this process (built once, ~0.1 s)."""
        with cls._default_lock:
            if cls._default is None:
                cls._default = cls()
            return cls._default

    @property
    def weight_bytes(self) -> int:
        """Bytes of the matmul weights read by every decode step."""
        mats = [self.head] + [m for layer in self.layers
                              for m in (layer.qkv, layer.proj, layer.up, layer.down)]
        return sum(m.w.nbytes for m in mats)

    def new_cache(self, capacity: int = 16) -> KVCache:
        """An empty KV cache for one sequence."""
        cfg = self.config
        return KVCache(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, cfg.max_seq_len, capacity)

    def forward(self, caches: Sequence[Any], chunks: Sequence[np.ndarray],
                every_position: bool | Sequence[bool] = False) -> np.ndarray:
        """Append `chunks[i]` (a prompt, a chunk of one, or one token) to sequence i's cache (a
        contiguous `KVCache` or a `PagedKV`); next-token logits (B, V), or with `every_position` the
        logits after every position of every chunk, in order (sum of chunk sizes, V): what verifying
        speculative tokens needs. A list of bools asks it per chunk (the others give their last
        position's row only). On a ValueError no cache is changed."""
        if len(caches) != len(chunks):
            raise ValueError(f"{len(caches)} caches but {len(chunks)} token chunks")
        if not caches:
            return np.zeros((0, self.config.vocab_size), dtype=np.float32)
        if len({id(c) for c in caches}) != len(caches):
            raise ValueError("the same KV cache appears twice in one step")
        toks, pos, lengths = self._check_chunks(caches, chunks)
        rows = _logit_rows(lengths, every_position)
        for cache, n in zip(caches, lengths):
            cache.reserve(cache.length + n)
        tokens = np.concatenate(toks)
        x = self.tok_emb[tokens] + self.pos_emb[np.concatenate(pos)]
        starts = np.concatenate([[0], np.cumsum(lengths)])
        cfg = self.config
        hd, hq, hkv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
        for li, layer in enumerate(self.layers):
            h = _layer_norm(x, layer.ln1_g, layer.ln1_b)
            qkv = layer.qkv(h)
            q, qf = _quantize_queries(qkv[:, :hq * hd], hq, hd, self._attn_scale)
            k = _quantize_kv(qkv[:, hq * hd:(hq + hkv) * hd]).reshape(-1, hkv, hd)
            v = _quantize_kv(qkv[:, (hq + hkv) * hd:]).reshape(-1, hkv, hd)
            # every sequence's new keys and values go in first, then each attends: a sequence that
            # shares another's blocks in this very step reads them written (as vLLM's kernels do)
            for i, cache in enumerate(caches):
                cache.write(li, cache.length, k[starts[i]:starts[i + 1]], v[starts[i]:starts[i + 1]])
            att = np.empty((x.shape[0], hq * hd), dtype=np.float32)
            for i, cache in enumerate(caches):
                a, b = starts[i], starts[i + 1]
                kc, vc = cache.read(li, cache.length + b - a)
                if b - a == 1:  # decode: the hot path, fewest numpy calls
                    att[a] = self._attend_one(q[a], qf[a], kc, vc)
                else:
                    att[a:b] = self._attend(q[a:b], qf[a:b], kc, vc, cache.length)
            x += layer.proj(att)
            h = _layer_norm(x, layer.ln2_g, layer.ln2_b)
            x += layer.down(_gelu(layer.up(h)))
        for cache, n in zip(caches, lengths):
            cache.length += n
        return self._logits(x[rows], tokens[rows])

    def _check_chunks(self, caches: Sequence[Any], chunks: Sequence[np.ndarray]
                      ) -> tuple[list[np.ndarray], list[np.ndarray], list[int]]:
        """Each chunk's token ids (int64), positions and size; ValueError for a bad chunk."""
        cfg = self.config
        toks, pos, lengths = [], [], []
        for cache, chunk in zip(caches, chunks):
            chunk = np.asarray(chunk)
            if chunk.ndim != 1 or chunk.size == 0:
                raise ValueError(f"each chunk must be a non-empty 1-D array of token ids, "
                                 f"got shape {chunk.shape}")
            _check_ids(chunk, cfg.vocab_size)
            if cache.length + chunk.size > cfg.max_seq_len:
                raise ValueError(f"sequence of {cache.length + chunk.size} tokens exceeds "
                                 f"max_seq_len {cfg.max_seq_len}")
            toks.append(chunk.astype(np.int64))
            pos.append(np.arange(cache.length, cache.length + chunk.size))
            lengths.append(chunk.size)
        return toks, pos, lengths

    def _attend_one(self, q: np.ndarray, qf: np.ndarray, k: np.ndarray, v: np.ndarray
                    ) -> np.ndarray:
        """Attention of one quantised query (H·hd,) with score factors (H,) over one
        sequence's quantised keys and values (Hkv, T, hd)."""
        cfg = self.config
        hkv = cfg.n_kv_heads
        group = cfg.n_heads // hkv
        s = np.matmul(q.reshape(hkv, group, cfg.head_dim), k.transpose(0, 2, 1))
        s *= qf.reshape(hkv, group, 1)
        return _probs_times_values(s, v).reshape(-1)

    def _attend(self, q: np.ndarray, qf: np.ndarray, k: np.ndarray, v: np.ndarray, past: int
                ) -> np.ndarray:
        """Causal attention of n new quantised queries (n, H·hd), factors (n, H), over one
        sequence's keys and values (Hkv, T, hd), the first `past` of which precede them."""
        cfg = self.config
        n, hd, hkv = q.shape[0], cfg.head_dim, cfg.n_kv_heads
        group = cfg.n_heads // hkv
        qh = q.reshape(n, hkv, group, hd).transpose(1, 2, 0, 3).reshape(hkv, group * n, hd)
        s = qh @ k.transpose(0, 2, 1)
        s *= qf.reshape(n, hkv, group).transpose(1, 2, 0).reshape(hkv, group * n, 1)
        t = np.arange(past + n)
        future = t[None, :] > (past + np.arange(n))[:, None]
        s[:, np.tile(future, (group, 1))] = -np.inf
        o = _probs_times_values(s, v)
        return o.reshape(hkv, group, n, hd).transpose(2, 0, 1, 3).reshape(n, cfg.n_heads * hd)

    def _logits(self, x_last: np.ndarray, last_tokens: np.ndarray) -> np.ndarray:
        h = _layer_norm(x_last, self.lnf_g, self.lnf_b)
        logits = self.head(h)
        logits *= self._ctx_w
        logits += self._prior_w * self.prior[last_tokens]
        return logits

    def prefill(self, prompt: Sequence[int] | np.ndarray,
                cache: KVCache | None = None) -> tuple[np.ndarray, KVCache]:
        """Run a prompt through a (new) cache; return next-token logits (V,) and the cache."""
        cache = cache if cache is not None else self.new_cache(len(prompt))
        logits = self.forward([cache], [np.asarray(prompt)])
        return logits[0], cache

    def decode_step(self, caches: Sequence[KVCache], tokens: Sequence[int] | np.ndarray
                    ) -> np.ndarray:
        """One decode step over a ragged batch: token i is appended to cache i; logits (B, V)."""
        tokens = np.asarray(tokens)
        if tokens.ndim != 1 or tokens.shape[0] != len(caches):
            raise ValueError(f"decode_step needs one token per cache: {len(caches)} caches, "
                             f"tokens of shape {tokens.shape}")
        return self.forward(caches, [tokens[i:i + 1] for i in range(len(caches))])

    def decode_shared(self, prefix: KVCache, tokens: Sequence[int] | np.ndarray) -> np.ndarray:
        """One decode step for B rows sharing one cached prefix (not changed): row i appends tokens[i];
        logits (B, V), bit-identical to `decode_step` on B copies of `prefix`."""
        tokens = np.asarray(tokens)
        cfg = self.config
        if tokens.ndim != 1 or tokens.size == 0 or not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(f"decode_shared needs a non-empty 1-D array of token ids, got shape {tokens.shape}")
        _check_ids(tokens, cfg.vocab_size)
        p = prefix.length
        if p + 1 > cfg.max_seq_len:
            raise ValueError(f"sequence of {p + 1} tokens exceeds max_seq_len {cfg.max_seq_len}")
        n, hd, hq, hkv = tokens.size, cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
        group = hq // hkv
        toks = tokens.astype(np.int64)
        x = self.tok_emb[toks] + self.pos_emb[p]
        s = np.empty((hkv, n * group, p + 1), dtype=np.float32)
        for li, layer in enumerate(self.layers):
            h = _layer_norm(x, layer.ln1_g, layer.ln1_b)
            qkv = layer.qkv(h)
            q, qf = _quantize_queries(qkv[:, :hq * hd], hq, hd, self._attn_scale)
            k = _quantize_kv(qkv[:, hq * hd:(hq + hkv) * hd]).reshape(n, hkv, 1, hd)
            v = _quantize_kv(qkv[:, (hq + hkv) * hd:]).reshape(n, hkv, 1, hd)
            qh = q.reshape(n, hkv, group, hd)
            # scores over the shared prefix (one matmul for all rows) and over each row's own token
            np.matmul(qh.transpose(1, 0, 2, 3).reshape(hkv, n * group, hd),
                      prefix.k[li, :, :p].transpose(0, 2, 1), out=s[:, :, :p])
            own = np.matmul(qh, k.transpose(0, 1, 3, 2))  # (n, hkv, group, 1)
            s[:, :, p:] = own.transpose(1, 0, 2, 3).reshape(hkv, n * group, 1)
            s *= qf.reshape(n, hkv, group).transpose(1, 0, 2).reshape(hkv, n * group, 1)
            pr = _rounded_probs(s)
            # P·V split in two exact integer sums: prefix values (shared) + the row's own value
            o = np.matmul(pr[:, :, :p], prefix.v[li, :, :p]).reshape(hkv, n, group, hd).transpose(1, 0, 2, 3)
            o += pr[:, :, p:].reshape(hkv, n, group, 1).transpose(1, 0, 2, 3) * v
            o *= KV_SCALE / PROB_LEVELS
            x += layer.proj(np.ascontiguousarray(o).reshape(n, hq * hd))
            h = _layer_norm(x, layer.ln2_g, layer.ln2_b)
            x += layer.down(_gelu(layer.up(h)))
        return self._logits(x, toks)

    def embed(self, tokens: np.ndarray) -> np.ndarray:
        """Pooled, L2-normalised final hidden states of rows (R, L) padded at the end with ``<pad>``
        (masked out of the mean); (R, d). No KV cache is kept."""
        tokens = np.asarray(tokens)
        cfg = self.config
        if tokens.ndim != 2 or tokens.shape[1] == 0:
            raise ValueError(f"embed takes a 2-D (rows, length) id array, got shape {tokens.shape}")
        _check_ids(tokens, cfg.vocab_size)
        r, n = tokens.shape
        if r == 0:
            return np.zeros((0, cfg.d_model), dtype=np.float32)
        if n > cfg.max_seq_len:
            raise ValueError(f"rows of {n} tokens exceed max_seq_len {cfg.max_seq_len}")
        valid = tokens != PAD_ID
        if not valid[:, 0].all():
            raise ValueError("every row must start with a real token (<pad> only at the end)")
        hd, hq, hkv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
        group = hq // hkv
        x = self.tok_emb[tokens.reshape(-1)] + np.tile(self.pos_emb[:n], (r, 1))
        future = np.tile(np.triu(np.ones((n, n), dtype=bool), 1), (group, 1))
        for layer in self.layers:
            h = _layer_norm(x, layer.ln1_g, layer.ln1_b)
            qkv = layer.qkv(h)
            qq, qf = _quantize_queries(qkv[:, :hq * hd], hq, hd, self._attn_scale)
            kv = _quantize_kv(qkv[:, hq * hd:]).reshape(r, n, 2 * hkv, hd)
            q = qq.reshape(r, n, hkv, group, hd).transpose(0, 2, 3, 1, 4)
            q = q.reshape(r, hkv, group * n, hd)
            k = kv[:, :, :hkv].transpose(0, 2, 1, 3)
            v = kv[:, :, hkv:].transpose(0, 2, 1, 3)
            s = q @ k.transpose(0, 1, 3, 2)
            s *= qf.reshape(r, n, hkv, group).transpose(0, 2, 3, 1).reshape(r, hkv, group * n, 1)
            s[:, :, future] = -np.inf
            o = _probs_times_values(s, v).reshape(r, hkv, group, n, hd).transpose(0, 3, 1, 2, 4)
            x += layer.proj(o.reshape(r * n, hq * hd))
            h = _layer_norm(x, layer.ln2_g, layer.ln2_b)
            x += layer.down(_gelu(layer.up(h)))
        h = _layer_norm(x, self.lnf_g, self.lnf_b).reshape(r, n, cfg.d_model)
        h *= valid[:, :, None]
        pooled = h.sum(axis=1) / valid.sum(axis=1, keepdims=True).astype(np.float32)
        pooled /= np.sqrt((pooled * pooled).sum(axis=1, keepdims=True))
        return pooled
