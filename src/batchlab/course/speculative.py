"""Chapter 11's speculative-decoding measurements on the real `lm_stream` (parameter
``speculative_method``): TPOT with and without speculation at concurrency 1 and 8, measured by the
server (its T_NS stamps), and the acceptance the server reports (DRAFTED per step, DRAFTED_TOKENS and
ACCEPTED_TOKENS per request) against the expected tokens per step (1 − α^(k+1)) / (1 − α).

The LM is the `decode` model's width (d_model 512, d_ff 2048, weights beyond the CPU caches): one
sequence's decode step then costs what going through the weights costs, so scoring k + 1 = 4
positions costs little more than 1, while 8 sequences' 32 positions cost clearly more than their 8:
the gain that batching eats (benchmarks/bench_speculative.py and chapter 11 measure both). At the
default width the extra positions are cheap too, but because a step is mostly Python overhead per
layer, not for the reason a GPU server has. Every function returns rows (dicts).
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from batchlab._validate import count
from batchlab.course.llm_serving import round_ratios, serving_server, stream_requests, token_prompt
from batchlab.lm import ContinuousBatcher, LMConfig, Sequence as Generation, ToyLM
from batchlab.server import TritonServer
from batchlab.theory.formulas import speculative_tokens_per_step, tpot

#: Draft tokens per step (vLLM's num_speculative_tokens) of the chapter's speculative models.
K = 3
#: The decode model's width: a decode step bound by reading the weights (chapter 03).
WIDE = {"d_model": "512", "d_ff": "2048"}
#: lm_stream copies the chapter measures: model name -> the config parameters it changes. One LM
#: width; speculation off; drafts from vLLM's ngram prompt lookup finished by the LM's bigram prior
#: (the draft the claims use: every step has k tokens, and the lookup catches the toy LM's loops);
#: the bigram prior alone (a weaker draft on this LM: a lower α, a smaller gain).
VARIANTS: dict[str, dict[str, str]] = {
    "lm_wide": dict(WIDE),
    "lm_wide_spec": {**WIDE, "speculative_method": "ngram_bigram", "num_speculative_tokens": str(K)},
    "lm_wide_bigram": {**WIDE, "speculative_method": "bigram", "num_speculative_tokens": str(K)},
}


def spec_server(variants: Mapping[str, Mapping[str, str]] = VARIANTS) -> TritonServer:
    """A private embedded server with the speculative variants (`llm_serving.serving_server`)."""
    return serving_server(variants)


def request_figures(responses: Sequence[Mapping[str, np.ndarray]]) -> dict[str, Any]:
    """One request's stream as the server reported it: its tokens, TPOT from the server's T_NS (ms), the
    median gap between the steps that emitted its tokens (`step_ms`: a step's duration while the engine
    stays busy), those steps as (drafted, accepted) pairs (a step's tokens share one T_NS:
    the accepted drafts and the target's own), and the server's totals DRAFTED_TOKENS and
    ACCEPTED_TOKENS; RuntimeError if the steps do not add up to the totals."""
    rows = [r for r in responses if "TOKEN" in r]
    value = lambda r, k: int(np.asarray(r[k]).reshape(-1)[0]) if k in r else 0  # noqa: E731
    t_ns = np.array([value(r, "T_NS") for r in rows], dtype=np.int64)
    steps: dict[int, list[int]] = {}
    for r, t in zip(rows, t_ns):
        steps.setdefault(int(t), [value(r, "DRAFTED"), 0])[1] += 1
    pairs = [(d, n - 1) for d, n in steps.values()]
    drafted, accepted = value(rows[-1], "DRAFTED_TOKENS"), value(rows[-1], "ACCEPTED_TOKENS")
    if (sum(d for d, _ in pairs), sum(a for d, a in pairs if d)) != (drafted, accepted):
        raise RuntimeError(f"the stream's steps ({pairs}) do not add up to the server's totals "
                           f"DRAFTED_TOKENS {drafted}, ACCEPTED_TOKENS {accepted}")
    gaps = np.diff(np.unique(t_ns)) / 1e6
    return {"tokens": [value(r, "TOKEN") for r in rows], "n_steps": len(steps),
            "tpot_ms": tpot(t_ns[-1] / 1e6, t_ns[0] / 1e6, len(rows)),
            "step_ms": float(np.median(gaps)) if gaps.size else float("nan"), "steps": [p for p in pairs if p[0]],
            "drafted": drafted, "accepted": accepted}


def spec_round(server: Any, model: str, concurrency: int = 1, max_tokens: int = 48, prompt: int = 16,
               seed: int = 0) -> dict[str, Any]:
    """`concurrency` greedy generations sent at once (prompts of `prompt` tokens, new each `seed`; request
    i asks for max_tokens + i tokens, which tells the streams apart): the median server-side TPOT and
    step duration (ms), tokens per decode step (all requests' tokens after the first over their steps after the first),
    the per-step (drafted, accepted) pairs, the totals, each request's (drafted, accepted) totals
    (`requests`) and its tokens."""
    n = count("concurrency", concurrency)
    lengths = [max_tokens + i for i in range(n)]
    got: dict[int, list] = {}

    def keep(responses: list) -> None:
        got[sum("TOKEN" in r for r in responses)] = responses

    stream_requests(server, model, [token_prompt(prompt, seed * 100 + i) for i in range(n)], lengths,
                    np.zeros(n), check=keep)
    per = [(request_figures(got[m]), m) for m in lengths]
    return _merged([{"model": model, "concurrency": n, "tpot_ms": p["tpot_ms"], "step_ms": p["step_ms"],
                     "decode_steps": p["n_steps"] - 1, "decode_tokens": m - 1, "drafted": p["drafted"],
                     "accepted": p["accepted"], "steps": p["steps"], "requests": [(p["drafted"], p["accepted"])],
                     "tokens": [p["tokens"]]} for p, m in per], np.median)


def acceptance(steps: Sequence[tuple[int, int]], k: int = K) -> dict[str, Any]:
    """What the (drafted, accepted) pairs of the steps that verified k draft tokens say:
    `acceptance_rate` (accepted / drafted, vLLM's draft acceptance rate); `alpha`, the per-position
    rate: accepted / positions the target judged (each accepted one, plus the first mismatch of a
    step that had one; drafts after it are never judged); `alpha_first`, the share of steps whose
    first draft token was accepted; the measured tokens per step (accepted + 1), the formula's
    (1 − α^(k+1)) / (1 − α) at `alpha`, at `alpha_first` and at the acceptance rate (which is not
    the formula's α: it counts the drafts after a mismatch as rejected, never judged); and how the accepted counts spread
    (`spread`: share of steps accepting 0 … k) next to what independent acceptance at `alpha` gives."""
    full = np.array([a for d, a in steps if d == k], dtype=np.int64)
    if full.size == 0:
        raise ValueError(f"no step verified {k} draft tokens")
    accepted, rejected = int(full.sum()), int((full < k).sum())
    alpha = accepted / (accepted + rejected)
    alpha_first = float(np.mean(full > 0))
    geometric = [alpha ** j * (1 - alpha) for j in range(k)] + [alpha ** k]
    return {"k": k, "steps": int(full.size), "acceptance_rate": accepted / (k * full.size), "alpha": alpha,
            "alpha_first": alpha_first, "tokens_per_step": float(full.mean() + 1),
            "predicted": speculative_tokens_per_step(alpha, k),
            "predicted_first": speculative_tokens_per_step(alpha_first, k),
            "predicted_at_rate": speculative_tokens_per_step(accepted / (k * full.size), k),
            "spread": (np.bincount(full, minlength=k + 1) / full.size).tolist(), "independent": geometric}


def offline_steps(method: str = "ngram_bigram", k: int = K, n: int = 8, max_tokens: int = 48, prompt: int = 16,
                  seed: int = 0) -> list[tuple[int, int]]:
    """In process, without a server: the (drafted, accepted) pairs of the steps that verified a draft when
    `n` greedy generations (the prompts and lengths `spec_round` sends with this `seed` at concurrency
    n) run on the chapter's wide LM with `method`'s draft (see `lm.speculative.DRAFTS`) and up to `k`
    draft tokens a step. The counts are the server's: the LM is exact and batch invariant, the drafts
    read only each request's own tokens."""
    lm = ToyLM(LMConfig(d_model=int(WIDE["d_model"]), d_ff=int(WIDE["d_ff"])))
    batcher = ContinuousBatcher(lm, max_active=count("n", n), draft=method, num_speculative_tokens=k)
    for i in range(n):
        batcher.submit(Generation(lm, token_prompt(prompt, seed * 100 + i), max_tokens + i, ignore_eos=True))
    steps = []
    while batcher.has_work:
        report = batcher.step()
        emitted = collections.Counter(id(s) for s, _ in report.emitted)
        steps += [(drafted, emitted[key] - 1) for key, drafted in report.drafted.items()]
    return steps


def spec_rounds(server: Any, models: Sequence[str] = tuple(VARIANTS), concurrencies: Sequence[int] = (1, 8),
                rounds: int = 3, max_tokens: int = 48, prompts_per_round: int = 4) -> list[dict[str, Any]]:
    """Interleaved rounds at each concurrency, after one warm-up request per model. In a round every
    model serves the same batches of `concurrency` requests, at least `prompts_per_round` prompts in
    all (new each round), the models taking turns batch by batch (a slow spell of the shared machine
    hits all alike); a model's round row: the mean of its batches' TPOTs and step durations, tokens per step over all
    its steps, the drafted and accepted totals, the steps and the tokens."""
    for m in models:
        spec_round(server, m, 1, max_tokens=8, seed=999)
    rows = []
    for c in concurrencies:
        batches = -(-count("prompts_per_round", prompts_per_round) // c)
        for r in range(count("rounds", rounds)):
            parts: dict[str, list] = {m: [] for m in models}
            for j in range(batches):
                for m in models:
                    parts[m].append(spec_round(server, m, c, max_tokens, seed=r * batches + j))
            rows += [{"round": r, **_merged(parts[m])} for m in models]
    return rows


def _merged(parts: Sequence[Mapping[str, Any]], average: Callable = np.mean) -> dict[str, Any]:
    """Rows of one model (its requests in a batch, its batches in a round) as one row: TPOT and step
    duration `average`d, the rest summed or listed."""
    steps = sum(p["decode_steps"] for p in parts)
    return {"model": parts[0]["model"], "concurrency": parts[0]["concurrency"],
            "tpot_ms": float(average([p["tpot_ms"] for p in parts])),
            "step_ms": float(average([p["step_ms"] for p in parts])),
            "tokens_per_step": sum(p["decode_tokens"] for p in parts) / steps, "decode_steps": steps,
            "decode_tokens": sum(p["decode_tokens"] for p in parts),
            "drafted": sum(p["drafted"] for p in parts), "accepted": sum(p["accepted"] for p in parts),
            "steps": [s for p in parts for s in p["steps"]], "requests": [r for p in parts for r in p["requests"]],
            "tokens": [t for p in parts for t in p["tokens"]]}


def tpot_gain(rows: Sequence[Mapping[str, Any]], spec: str, base: str = "lm_wide") -> list[dict[str, Any]]:
    """Per concurrency: the median TPOT of `base` and of `spec` (ms), and TPOT base / spec round by round
    (the two ran back to back) with its median: the speculative gain."""
    out = []
    for c in dict.fromkeys(r["concurrency"] for r in rows):
        at = [r for r in rows if r["concurrency"] == c]
        ratios = round_ratios(at, "tpot_ms", base, spec)
        out.append({"concurrency": c, "model": spec,
                    "tpot_base_ms": float(np.median([r["tpot_ms"] for r in at if r["model"] == base])),
                    "tpot_spec_ms": float(np.median([r["tpot_ms"] for r in at if r["model"] == spec])),
                    "gain_rounds": ratios, "gain": float(np.median(ratios))})
    return out


def same_tokens(rows: Sequence[Mapping[str, Any]], base: str = "lm_wide") -> bool:
    """Whether every speculative model gave each request the very tokens `base` gave it, round by round."""
    by = {(r["round"], r["concurrency"], r["model"]): r["tokens"] for r in rows}
    return all(toks == by[(rnd, c, base)] for (rnd, c, m), toks in by.items() if (rnd, c, base) in by)
