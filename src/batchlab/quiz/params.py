"""Seeded numeric questions: learner → seed, seed → parameters, and the registry of formulas a
question may name (the course's own `batchlab.theory` computations, some adapted to the units
the stems use), so a quiz answer is computed the way the chapter computes it.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import re
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from batchlab._validate import count
from batchlab.theory import formulas as F
from batchlab.theory import kv
from batchlab.theory.roofline import ridge_batch


@dataclass(frozen=True)
class Formula:
    """A named formula `func(**params) -> float`; `rename` maps a question's parameter name to
    `func`'s (`B` → `batch_size`); parameters with a default are asked for only when renamed."""

    name: str
    func: Callable[..., float]
    rename: Mapping[str, str] = field(default_factory=dict)

    @property
    def param_names(self) -> tuple[str, ...]:
        """The keyword parameters a question gives the formula, in signature order."""
        back = {theirs: ours for ours, theirs in self.rename.items()}
        return tuple(back.get(n, n) for n, p in inspect.signature(self.func).parameters.items()
                     if p.default is inspect.Parameter.empty or n in back)

    def __call__(self, **params: Any) -> float:
        return float(self.func(**{self.rename.get(k, k): v for k, v in params.items()}))


FORMULAS: dict[str, Formula] = {}
"""Registry of formulas that seeded numeric questions may name (`"formula": "amdahl"`)."""


def _register(func: Callable[..., float], name: str | None = None, **rename: str) -> Callable[..., float]:
    """Register `func` under `name` (default: its own); `rename` maps the question's parameter
    names to the function's."""
    FORMULAS[name or func.__name__] = Formula(name or func.__name__, func, dict(rename))
    return func


def formula(name: str) -> Formula:
    """The registered formula called `name`; ValueError naming the known ones otherwise."""
    if name not in FORMULAS:
        raise ValueError(f"unknown formula {name!r} (known: {', '.join(sorted(FORMULAS))})")
    return FORMULAS[name]


# The formulas, in chapter order (00 … 08).
@partial(_register, name="t_total")
def _t_total_ms(t_queue: float, t_prefill: float, n_tokens: int, t_token: float, t_overhead: float) -> float:
    """T_total = T_queue + T_prefill + n_tokens·t_token + T_overhead (all in ms)."""
    return F.t_total(t_queue, t_prefill, n_tokens * t_token, t_overhead)


@partial(_register, name="utilization")
def _utilization_pct(rate: float, service_ms: float) -> float:
    """Busy fraction ρ = λ·s in percent (λ in req/s, s in ms)."""
    return rate * service_ms / 1000.0 * 100.0


@_register
def ridge(tflops: float, tbs: float) -> float:
    """Batch at which bf16 decode reaches the roofline ridge (≈ FLOP per byte at the ridge)."""
    return ridge_batch(tbs * 1e12, tflops * 1e12, bytes_per_param=2)


@_register
def decode_tps(B: int, t_step_ms: float) -> float:
    """Decode throughput in tokens/s: B sequences each gain one token per step of t_step ms."""
    return B * 1000.0 / t_step_ms


_register(F.speedup, B="batch_size")
_register(F.affine_speedup, B="batch_size")


@_register
def affine_throughput(a: float, b: float, B: int) -> float:
    """Throughput in req/s of one instance running full batches, t(B) = a + b·B in ms."""
    return F.batch_capacity(a / 1000.0, b / 1000.0, B)


_register(F.padding_efficiency, "eta", L="lengths")
_register(kv.kv_bytes_per_token, "kv_bytes", layers="n_layers", kv_heads="n_kv_heads",
          dtype_bytes="bytes_per_element")


@_register
def kv_gib(bytes_per_token: int, tokens: int, seqs: int) -> float:
    """KV cache size in GiB for `seqs` sequences of `tokens` tokens each."""
    return bytes_per_token * tokens * seqs / 2**30


@_register
def kv_max_seqs(free_gib: float, bytes_per_token: int, tokens: int) -> float:
    """How many sequences of `tokens` tokens fit in `free_gib` GiB of KV cache (rounded down)."""
    return kv.max_concurrent_sequences(float(free_gib) * 2**30, bytes_per_token, tokens)  # float(): a list would repeat 2^30 times


_register(F.heavy_load_wait, "t_wait", b_size="batch_size")


_register(F.tpot, "tpot_ms", e2e="e2e_s", ttft="ttft_s", n="n_tokens")
_register(F.prefill_steps, "prefill_steps", P="prompt_tokens", M="max_num_tokens", d="decoding")
_register(F.prefix_hit_tokens, "prefix_hit_tokens", s="shared_tokens", b="block_size")
_register(F.speculative_tokens_per_step, "spec_tokens_per_step")


@partial(_register, name="md1_wait")
def _md1_wait_ms(rate: float, service_ms: float) -> float:
    """M/D/1 mean queueing delay Wq = ρ / (2μ(1−ρ)) in ms (λ in req/s, service time in ms)."""
    rho = rate * service_ms / 1000.0
    if not 0 <= rho < 1:
        raise ValueError(f"md1_wait needs utilisation < 1, got ρ = {rho:g}")
    return F.md1_wait(rate, service_ms / 1000.0) * 1000.0


@_register
def concurrency_rule(max_batch_size: int, instances: int) -> float:
    """Triton optimization.md rule of thumb: client concurrency = 2 × max_batch_size × instances."""
    return 2 * max_batch_size * instances


_register(F.amdahl, B="batch_size")
_register(F.amdahl_ceiling)


@_register
def amdahl_batch_for(f: float, p: float) -> float:
    """Smallest integer B with S_p ≥ p · 1/(1−f): ceil(f·p / ((1−f)(1−p)))."""
    return float(math.ceil(f * p / ((1.0 - f) * (1.0 - p)) - 1e-9))


@_register
def mean_batch(inference_count: int, exec_count: int) -> float:
    """Mean batch size from Triton metrics: nv_inference_count / nv_inference_exec_count."""
    return inference_count / exec_count


@_register
def cost_per_k(c_gpu: float, t_busy_s: float, n_req: int) -> float:
    """Cost per 1,000 requests = 1000 · C_GPU ($/h) · T_busy (h) / N_req."""
    return 1000.0 * F.cost_per_request(c_gpu, t_busy_s, n_req)


_register(F.littles_law_l, "little", rate="arrival_rate", latency_s="mean_time_in_system")
_register(F.instances_needed, rate="rate_per_s", B="batch")


@_register
def demo_padding_wait(L: Sequence[int], rate: float) -> float:
    """Mean extra time a request of the article's naive mode rides along: (L_max − mean L)/rate."""
    return (max(L) - sum(L) / len(L)) / rate


def seed_for(learner: str) -> int:
    """A stable non-negative seed for a learner id (sha256 of the stripped id, first 8 bytes)."""
    if not isinstance(learner, str) or not learner.strip():
        raise ValueError("learner id must be a non-empty string")
    return qid_key(learner.strip())


def qid_key(qid: str) -> int:
    """A stable non-negative integer for a string (sha256, first 8 bytes)."""
    return int.from_bytes(hashlib.sha256(qid.encode("utf-8")).digest()[:8], "big") >> 1


def draw_params(params: Mapping[str, Sequence[Any]], defaults: Mapping[str, Any], qid: str,
                seed: int | None) -> dict[str, Any]:
    """One value per parameter: `defaults` when `seed` is None, else drawn (in the bank's order)
    by `default_rng([seed, qid_key(qid)])`, so it depends only on seed, question and choices."""
    if seed is None:
        return dict(defaults)
    count("seed", seed, lo=0)
    rng = np.random.default_rng([int(seed), qid_key(qid)])
    return {name: choices[int(rng.integers(len(choices)))] for name, choices in params.items()}


_PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def placeholders(template: str) -> list[str]:
    """The `{{name}}` placeholders in a template, in order of appearance."""
    return _PLACEHOLDER.findall(template)


def fmt_number(x: float) -> str:
    """A number as a learner would write it: integers plainly, others with ≤ 4 significant digits."""
    xf = float(x)
    if math.isfinite(xf) and xf == round(xf) and abs(xf) < 1e15:
        return f"{int(round(xf)):,}" if abs(xf) >= 10000 else str(int(round(xf)))
    return f"{xf:,.1f}" if abs(xf) >= 1000 else f"{xf:.4g}"


def fmt_value(v: Any) -> str:
    """A parameter value as it appears in a stem: numbers plainly, lists as `[a, b, c]`."""
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(fmt_value(x) for x in v) + "]"
    if isinstance(v, float):
        return format(v, "g") if abs(v) < 1e6 else fmt_number(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}" if abs(v) >= 10000 else str(v)
    return str(v)


def render_template(template: str, values: Mapping[str, Any]) -> str:
    """Replace each `{{name}}` with `fmt_value(values[name])`; ValueError on an unknown name."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in values:
            raise ValueError(f"template placeholder {{{{{name}}}}} has no parameter")
        return fmt_value(values[name])

    return _PLACEHOLDER.sub(sub, template)
