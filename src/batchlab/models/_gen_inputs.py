"""Reading generation requests (PROMPT, MAX_TOKENS, TEMPERATURE, SEED, IGNORE_EOS)."""

from __future__ import annotations

from typing import Any

from batchlab.lm.generation import Sequence
from batchlab.lm.model import ToyLM
from batchlab.models.triton_io import (InputError, expect_dtype, get, int_param, per_row_scalar,
                                       require, rows_of)

#: Upper bound of MAX_TOKENS unless the config's `max_tokens_limit` parameter says otherwise.
DEFAULT_MAX_TOKENS_LIMIT = 256
#: Upper bound of the prompt length unless `max_prompt_tokens` says otherwise.
DEFAULT_MAX_PROMPT_TOKENS = 256


def generation_limits(params: dict, max_seq_len: int) -> tuple[int, int]:
    """(max_prompt_tokens, max_tokens_limit) from a model's config `parameters`, within the LM's length."""
    return (int_param(params, "max_prompt_tokens", DEFAULT_MAX_PROMPT_TOKENS, 1, max_seq_len - 1),
            int_param(params, "max_tokens_limit", DEFAULT_MAX_TOKENS_LIMIT, 1, max_seq_len - 1))


def read_sequences(lm: ToyLM, request: Any, batched: bool, max_prompt: int, max_tokens_limit: int,
                   seq_id: Any = None) -> list[Sequence]:
    """The `Sequence`s of one request (one per batch row, one unbatched); InputError names the
    first problem (missing input, dtype, rank, vocabulary, limits, TEMPERATURE or SEED)."""
    prompt = require(request, "PROMPT")
    expect_dtype(prompt, "PROMPT", "iu")
    if batched:
        rows = rows_of(prompt, "PROMPT", 2)
        prompts = [prompt[r] for r in range(rows)]
    else:
        if prompt.ndim != 1:
            raise InputError(f"input PROMPT has shape {list(prompt.shape)}, expected [n]")
        rows, prompts = 1, [prompt]
    max_tokens = require(request, "MAX_TOKENS")
    expect_dtype(max_tokens, "MAX_TOKENS", "iu")
    max_tokens = per_row_scalar(max_tokens, "MAX_TOKENS", rows, 0)
    optional = []
    for name, kinds, default in (("TEMPERATURE", "f", 0.0), ("SEED", "iu", 0), ("IGNORE_EOS", "b", False)):
        arr = get(request, name)
        if arr is not None:
            expect_dtype(arr, name, kinds)
        optional.append(per_row_scalar(arr, name, rows, default))
    temperature, seed, ignore_eos = optional
    seqs = []
    for r in range(rows):
        if prompts[r].size > max_prompt:
            raise InputError(f"PROMPT has {prompts[r].size} tokens, the limit is {max_prompt}")
        if not 1 <= int(max_tokens[r]) <= max_tokens_limit:
            raise InputError(f"MAX_TOKENS must lie in [1, {max_tokens_limit}], "
                             f"got {int(max_tokens[r])}")
        if int(seed[r]) < 0:
            raise InputError(f"SEED must be >= 0, got {int(seed[r])}")
        try:
            seqs.append(Sequence(lm, prompts[r], int(max_tokens[r]), float(temperature[r]),
                                 int(seed[r]), bool(ignore_eos[r]), seq_id=seq_id))
        except ValueError as exc:
            raise InputError(str(exc)) from None
    return seqs
