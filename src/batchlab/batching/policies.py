"""The two kinds of policy the continuous-batching `Scheduler` runs, each a small object or function:

* admission — how much of the KV pool a request holds: `ReserveAdmission` (its whole future at
  start, TensorRT-LLM's ``guaranteed_no_evict``) or `OnDemandAdmission` (block by block, vLLM);
* the step's shape — how the token budget goes to prompts (`STEP_POLICIES`): prefill-first
  (vLLM V0, nano-vllm), mixed whole prompts (Orca) or chunked (Sarathi-Serve, vLLM V1).
"""

from __future__ import annotations

from typing import Callable, Iterable, Protocol, Sequence

from .request import GenerationRequest


class AdmissionPolicy(Protocol):
    """How much of the pool a request holds; the scheduler asks before every step it takes part in."""

    def kv_tokens(self, request: GenerationRequest, n_new: int) -> int:
        """Tokens its block table must hold before a step computes its next `n_new` positions."""

    def select(self, waiting: Sequence[GenerationRequest], running: Sequence[GenerationRequest]) -> Iterable[int]:
        """Indices of the waiting requests the scheduler may start, in the order to try them."""


class FCFSOrder:
    """First come, first served: every waiting request, in arrival order."""

    def select(self, waiting: Sequence[GenerationRequest], running: Sequence[GenerationRequest]) -> Iterable[int]:
        """All of `waiting`, in order."""
        return range(len(waiting))


class ReserveAdmission(FCFSOrder):
    """TensorRT-LLM's ``guaranteed_no_evict``: a request takes the blocks of its whole future (prompt +
    max_tokens) when it starts, so it never runs out of KV; the price is memory held idle."""

    def kv_tokens(self, request: GenerationRequest, n_new: int) -> int:
        """Prompt + max_tokens, from the first step."""
        return request.reserved_tokens


class OnDemandAdmission(FCFSOrder):
    """vLLM's PagedAttention: a request takes a block only when it grows into one; when the pool runs
    out, the scheduler preempts the newest request (recompute)."""

    def kv_tokens(self, request: GenerationRequest, n_new: int) -> int:
        """What it will store after this step."""
        return request.computed + n_new


ADMISSION = {"reserve": ReserveAdmission, "on_demand": OnDemandAdmission}


def prefill_chunks(remaining: list[int], n_decoding: int, max_num_tokens: float) -> list[int]:
    """Chunked prefill's split of one step (Sarathi-Serve; vLLM's `max_num_batched_tokens`,
    TensorRT-LLM's `max_num_tokens`): the prompt tokens each prompting request computes now, in
    queue order, given the tokens each has left (`remaining`) and the decodes running."""
    # The decodes take their one token each first: a running sequence's next token is never
    # delayed by someone else's prompt, so no step grows past the budget and ITL stays flat.
    room = max_num_tokens - n_decoding
    chunks = []
    for left in remaining:
        # The earliest prompt gets what is left first (nobody overtakes it); it never takes more
        # than its prompt still needs, and with no room left it waits for the next step.
        chunk = max(0, min(left, room))
        chunks.append(chunk)
        room -= chunk
    return chunks


def whole_prompts(remaining: list[int], n_decoding: int, max_num_tokens: float) -> list[int]:
    """Whole prompts (Orca's selective batching; vLLM V0's and nano-vllm's prefill steps): each prompt
    in queue order computes all it has left if that fits beside the decodes; the first that does not
    fit waits, and everyone behind it. A prompt larger than the budget runs as a step's only work."""
    room, chunks = max_num_tokens - n_decoding, []
    for left in remaining:
        alone = n_decoding == 0 and not chunks
        fits = (left <= room or alone) and (not chunks or chunks[-1] > 0)
        chunks.append(left if fits else 0)
        room -= chunks[-1]
    return chunks


#: The split's signature: (remaining, n_decoding, max_num_tokens) -> chunks (a lab writes its own).
PrefillSplit = Callable[[list[int], int, float], list[int]]
#: The step policies: (prompts' split, whether decodes run in a step that computes prompt tokens).
STEP_POLICIES: dict[str, tuple[PrefillSplit, bool]] = {
    "prefill_first": (whole_prompts, False),  # vLLM V0's default before chunking, nano-vllm
    "mixed": (whole_prompts, True),           # Orca: whole prompts ride with the decodes
    "chunked": (prefill_chunks, True),        # Sarathi-Serve, vLLM V1: chunks within the budget
}
