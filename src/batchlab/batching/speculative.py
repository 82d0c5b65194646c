"""Speculative decoding's acceptance rule, greedy (Leviathan et al., ICML '23; Chen et al. 2023;
vLLM's rejection sampler at temperature 0).

A cheap draft proposed k tokens after a sequence's last token; the target model scored all k + 1
positions in one step, and `target_argmax[j]` is its own greedy token after the last token and the
first j draft tokens. The output stays exactly what plain greedy decoding gives, token for token.
"""

from __future__ import annotations

from typing import Sequence


def accept(draft_tokens: Sequence[int], target_argmax: Sequence[int]) -> tuple[int, int]:
    """Greedy acceptance: keep the longest prefix of the draft that matches the target's argmax,
    then take the target's own token at the first mismatch (or after the whole draft). Returns
    (accepted, next_token): the step emits ``draft_tokens[:accepted] + [next_token]``."""
    if len(target_argmax) != len(draft_tokens) + 1:
        raise ValueError(f"{len(draft_tokens)} draft tokens need {len(draft_tokens) + 1} target tokens "
                         f"(one per verified position), got {len(target_argmax)}")
    accepted = 0
    for draft, target in zip(draft_tokens, target_argmax):
        if draft != target:
            break  # the target disagrees here: every draft token after it is rejected too
        accepted += 1
    return accepted, int(target_argmax[accepted])
