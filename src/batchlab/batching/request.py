"""What the continuous-batching scheduler tracks: a `GenerationRequest` (one generation: its tokens,
how many positions have KV, its block table) and a `StepPlan` (one step's work, as the executor and a
cost model read it). nano-vllm's ``engine/sequence.py``; vLLM's ``v1/request.py`` and SchedulerOutput."""

from __future__ import annotations

from dataclasses import dataclass, field

from .blocks import BlockTable


@dataclass(eq=False, slots=True)
class GenerationRequest:
    """One generation as the scheduler tracks it; `payload` is what the executor needs."""

    seq_id: object
    token_ids: list[int]          # the prompt, then each token as it is sampled
    max_tokens: int
    payload: object = None
    prompt_tokens: int = 0        # set from token_ids
    generated: int = 0            # tokens sampled so far
    computed: int = 0             # positions whose KV is stored (the next step starts here)
    table: BlockTable = field(default_factory=BlockTable)
    cached_tokens: int = 0        # tokens its last admission found in the prefix cache
    preemptions: int = 0
    recomputed_tokens: int = 0    # positions computed again after preemptions
    high_water: int = 0           # positions ever computed (or taken from the cache)
    draft: list[int] = field(default_factory=list)  # speculative tokens to verify at its next decode
    drafted: int = 0              # draft tokens verified so far (speculative decoding)
    accepted: int = 0             # of which the target accepted

    def __post_init__(self) -> None:
        self.prompt_tokens = self.prompt_tokens or len(self.token_ids)

    @property
    def left(self) -> int:
        """Positions to compute before it samples its next token (1 while decoding)."""
        return len(self.token_ids) - self.computed

    @property
    def decoding(self) -> bool:
        """Past its prompt (and any recomputation): it needs one token per step."""
        return self.generated > 0 and self.left == 1

    @property
    def reserved_tokens(self) -> int:
        """KV tokens it may come to hold: prompt + max_tokens."""
        return self.prompt_tokens + self.max_tokens

    @property
    def kv_tokens(self) -> int:
        """KV tokens it stores now."""
        return self.computed


@dataclass(slots=True)
class StepPlan:
    """One step's work: `work` (request, positions it computes now) in running order; who was
    admitted and preempted; the token counts a cost model prices."""

    work: list[tuple[GenerationRequest, int]] = field(default_factory=list)
    decode: list[GenerationRequest] = field(default_factory=list)                  # 1 + its drafts each
    prefill: list[tuple[GenerationRequest, int]] = field(default_factory=list)     # prompt positions
    admitted: list[GenerationRequest] = field(default_factory=list)
    preempted: list[GenerationRequest] = field(default_factory=list)
    tokens: int = 0                  # positions computed in the step
    prefill_tokens: int = 0          # of which in prompts (and recomputations)
    context_tokens: int = 0          # KV positions the decodes attend to (each includes itself)
    useful_tokens: int = 0           # positions computed for the first time
    draft_tokens: int = 0            # of the decodes' positions, speculative tokens to verify
    kv_blocks: int = 0               # pool blocks held during the step

    @property
    def batch(self) -> list[GenerationRequest]:
        """The requests in the step."""
        return [r for r, _ in self.work]

    def add(self, request: GenerationRequest, n: int, decoding: bool) -> None:
        """Put `n` positions of `request` (`decoding`: its last token, then n - 1 draft tokens) in the
        step and count them."""
        self.work.append((request, n))
        self.tokens += n
        computed = request.computed
        if decoding:  # its last token and any draft tokens: n positions, each attending to all before it
            self.decode.append(request)
            self.context_tokens += n * computed + n * (n + 1) // 2
            self.draft_tokens += n - 1
        else:
            self.prefill.append((request, n))
            self.prefill_tokens += n
        new = computed + n - (computed if computed > request.high_water else request.high_water)
        new = new if new > 0 else 0
        self.useful_tokens += new
        request.recomputed_tokens += n - new
