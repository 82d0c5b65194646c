"""Request-level (static, padded) generation batching: ``model.generate`` behind Triton's dynamic batcher.

A batch pads every prompt to the longest and decodes ``max(output) - 1`` steps for every member;
responses return when the batch ends (with ``early_return``: at the member's last token).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from batchlab._validate import integer, int_array, times_array
from batchlab.batching.dynamic import BatchRule, QueuedRequest
from .dynamic import QueuePolicy, run_events
from .results import SimResult
from .service import TokenCost


def simulate_static_generation(
    arrivals: np.ndarray | Sequence[float],
    prompt_tokens: np.ndarray | Sequence[int],
    output_tokens: np.ndarray | Sequence[int],
    cost: TokenCost,
    max_batch_size: int,
    max_queue_delay_us: float = 0.0,
    preferred_batch_sizes: Sequence[int] = (),
    instances: int = 1,
    early_return: bool = False,
    warmup: float = 0.1,
) -> SimResult:
    """Simulate padded request-level batching of generation requests (the prefill gives the first token)."""
    a = times_array("arrivals", arrivals)
    p = int_array("prompt_tokens", prompt_tokens, a.size, lo=1)
    o = int_array("output_tokens", output_tokens, a.size, lo=1)
    if not isinstance(cost, TokenCost):
        raise ValueError("cost must be a TokenCost")
    k = integer("instances", instances, lo=1)
    rule = BatchRule(max_batch_size, tuple(preferred_batch_sizes or ()), max_queue_delay_us)
    padded = _PaddedBatches(p.tolist(), o.tolist(), cost)
    rec, bat = run_events(a, rule, padded.batch_time, k, None, [QueuePolicy()])
    rec["prompt_tokens"] = p
    rec["output_tokens"] = o
    if bat.size:
        rows = np.asarray(padded.rows, dtype=np.int64)
        longest_prompt, longest_output = rows[:, 0], rows[:, 1]
        size = bat["size"].astype(np.int64)
        bat["prefill_tokens"] = size * longest_prompt
        bat["decode_seqs"] = size
        bat["useful_tokens"] = rows[:, 2]
        bat["executed_tokens"] = rows[:, 3]
        bat["kv_tokens"] = size * (longest_prompt + longest_output - 1)
        prefill_end = bat["start"] + np.asarray(
            [cost.padded_prefill_time(int(s), int(x)) for s, x in zip(size, longest_prompt)])
        served = rec["batch_id"] >= 0
        batch_of = rec["batch_id"][served]
        rec["first_token"][served] = prefill_end[batch_of]
        if early_return:
            # member's own last token: prefill, then (o - 1) padded steps of the whole batch
            steps = o[served] - 1
            rec["finish"][served] = prefill_end[batch_of] + np.asarray([
                cost.padded_decode_time(int(size[j]), int(longest_prompt[j]), int(s))
                for j, s in zip(batch_of, steps)])
    config = dict(max_batch_size=rule.max_batch_size, preferred_batch_sizes=list(rule.effective_preferred),
                  max_queue_delay_us=rule.max_queue_delay_us, instances=k, early_return=early_return,
                  cost=repr(cost))
    return SimResult(rec, bat, "static_generation", config, instances=k, capacity_rps=None, warmup=warmup,
                     extra={"eta": "tokens", "kv": True, "tokens": True})


class _PaddedBatches:
    """Prices a padded batch (every member padded to the longest prompt and output) and keeps one
    row per batch: longest prompt, longest output, useful tokens, executed tokens."""

    def __init__(self, prompts: list[int], outputs: list[int], cost: TokenCost) -> None:
        self.prompts, self.outputs, self.cost = prompts, outputs, cost
        self.rows: list[tuple[int, int, int, int]] = []

    def batch_time(self, batch: Sequence[QueuedRequest]) -> float:
        """Execution time of ``batch`` (its requests; recorded in `rows`)."""
        members = [request.id for request in batch]
        longest_prompt = max(self.prompts[r] for r in members)
        longest_output = max(self.outputs[r] for r in members)
        useful = sum(self.prompts[r] + self.outputs[r] - 1 for r in members)
        executed = len(members) * (longest_prompt + longest_output - 1)
        self.rows.append((longest_prompt, longest_output, useful, executed))
        return self.cost.padded_batch_time(len(members), longest_prompt, longest_output)
