"""What to send and when: request specifications (a source is one spec, a list cycled, or a callable
``i -> spec``) and open-loop arrival schedules fixed in advance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, Union

import numpy as np

from batchlab._validate import non_negative, optional_count, positive, rng_of

Outputs = Mapping[str, np.ndarray]  # A response's output tensors by name.

Check = Callable[[Any], "str | None"]  # Validates a response: returns None when it is right, else a one-line reason.


@dataclass(frozen=True)
class RequestSpec:
    """One inference request. `outputs`: the outputs to request (None: all); `check(decoded)` (a dict
    of arrays, a list of them for a stream) returns None or why the answer is wrong;
    `count_tokens(outputs)`: the tokens of a unary answer that holds many; `expected_tokens`: a
    stream returning another number fails.
    """

    inputs: Mapping[str, np.ndarray]
    outputs: Sequence[str] | None = None
    check: Check | None = None
    sequence_id: int = 0
    sequence_start: bool = False
    sequence_end: bool = False
    priority: int = 0
    expected_tokens: int | None = None
    count_tokens: Callable[[Outputs], int] | None = None

    def __post_init__(self) -> None:
        if not self.inputs:
            raise ValueError("RequestSpec needs at least one input tensor")
        for name, arr in self.inputs.items():
            if not isinstance(arr, np.ndarray):
                raise ValueError(f"input {name!r} must be a numpy array, not {type(arr).__name__}")


@dataclass(frozen=True)
class SequenceSpec:
    """A client-driven stateful sequence: `step(k, previous_outputs or None)` returns request k or None
    when over. The runner sets the id, START and END (with `n_steps` None, `step` sets
    `sequence_end` itself). Each step's response counts as one token.
    """

    step: Callable[[int, Outputs | None], RequestSpec | None]
    sequence_id: int
    n_steps: int | None = None
    check: Callable[[list[Outputs]], "str | None"] | None = None


Spec = Union[RequestSpec, SequenceSpec]
RequestSource = Union[Spec, Sequence[Spec], Callable[[int], Spec]]


def as_factory(source: RequestSource) -> Callable[[int], Spec]:
    """Turn a request source into ``i -> spec``."""
    if isinstance(source, (RequestSpec, SequenceSpec)):
        return lambda i: source
    if callable(source):
        return source
    if isinstance(source, Sequence) and not isinstance(source, (str, bytes)):
        if len(source) == 0:
            raise ValueError("the request list is empty")
        items = list(source)
        return lambda i: items[i % len(items)]
    raise ValueError(f"requests must be a RequestSpec, a list of them or a callable i -> spec, not {type(source).__name__}")


def poisson_arrivals(rate: float, n: int | None = None, duration: float | None = None,
                     seed: int | np.random.Generator = 0) -> np.ndarray:
    """Seeded send times (s, from 0) of a Poisson process at `rate` req/s: the first `n` and/or all
    before `duration`, whichever ends first."""
    positive("rate", rate)
    if n is None and duration is None:
        raise ValueError("give n (requests) or duration (seconds) to bound the schedule")
    optional_count("n", n, lo=0)
    if duration is not None:
        non_negative("duration", duration)
    rng = rng_of(seed)
    if n is None:
        guess = int(rate * duration * 1.2 + 10 * np.sqrt(rate * duration) + 10)
        t = np.cumsum(rng.exponential(1.0 / rate, guess))
        while t[-1] < duration:
            t = np.concatenate([t, t[-1] + np.cumsum(rng.exponential(1.0 / rate, guess))])
    else:
        t = np.cumsum(rng.exponential(1.0 / rate, n))
    if duration is not None:
        t = t[t < duration]
    return t

