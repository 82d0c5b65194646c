"""What to send and when: request specifications and arrival schedules.

A load run asks a *request source* for request number ``i`` (a `RequestSpec`, or a `SequenceSpec`
for a client-driven stateful sequence). A source is a single spec (sent every time), a list
(cycled), or a callable ``i -> spec``. Open-loop runs also take an *arrival schedule*: the send
times, fixed in advance, so that a slow server cannot slow the arrivals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, Union

import numpy as np

from batchlab._validate import positive, rng_of

Outputs = Mapping[str, np.ndarray]
"""A response's output tensors by name."""

Check = Callable[[Any], "str | None"]
"""Validates a response: returns None when it is right, else a one-line reason."""


@dataclass(frozen=True)
class RequestSpec:
    """One inference request.

    `inputs` maps input names to numpy arrays (shape includes the batch dimension when the model
    batches). `outputs` names the outputs to request (None: all). `check`, when given, receives
    the decoded outputs (a dict of arrays; for a stream, the list of per-response dicts) and
    returns None or a reason the answer is wrong. `sequence_id` / `sequence_start` /
    `sequence_end` address a stateful model; `timeout_us` is Triton's per-request timeout.
    `count_tokens`, for a unary request whose one answer holds many tokens (request-level
    generation), returns that number from the decoded outputs; `expected_tokens` makes a
    stream that returns another number of tokens a failure.
    """

    inputs: Mapping[str, np.ndarray]
    outputs: Sequence[str] | None = None
    check: Check | None = None
    parameters: Mapping[str, Any] | None = None
    sequence_id: int = 0
    sequence_start: bool = False
    sequence_end: bool = False
    priority: int = 0
    timeout_us: int | None = None
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
    """A client-driven stateful sequence: several requests with one correlation id.

    `step(k, previous_outputs)` returns request ``k`` of the sequence (previous_outputs is None
    for k = 0) or None when the sequence is over. The runner sets `sequence_id`, START on the first
    request and END on the last (`n_steps` must be known for END; with `n_steps` None the step
    function must set `sequence_end` itself). Each step's response counts as one token.
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


# --------------------------------------------------------------------------- arrival schedules


def _count(rate: float, n: int | None, duration: float | None) -> None:
    positive("rate", rate)
    if n is None and duration is None:
        raise ValueError("give n (requests) or duration (seconds) to bound the schedule")
    if n is not None and n < 0:
        raise ValueError(f"n must be >= 0, not {n}")
    if duration is not None and duration < 0:
        raise ValueError(f"duration must be >= 0, not {duration}")


def poisson_arrivals(rate: float, n: int | None = None, duration: float | None = None,
                     seed: int | np.random.Generator = 0) -> np.ndarray:
    """Send times (s, from 0) of a Poisson process at `rate` req/s: the first `n`, or all before `duration`.

    With both bounds, whichever comes first ends the schedule. Seeded, so a run is reproducible.
    """
    _count(rate, n, duration)
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


@dataclass
class Stage:
    """A part of a piecewise-constant rate schedule: `rate` req/s for `duration` seconds."""

    rate: float
    duration: float
    meta: dict[str, Any] = field(default_factory=dict)


def staged_poisson(stages: Sequence[Stage], seed: int | np.random.Generator = 0) -> np.ndarray:
    """Poisson send times through consecutive stages of different rates (a load step or ramp)."""
    rng = rng_of(seed)
    out, t0 = [], 0.0
    for st in stages:
        if st.rate > 0:
            out.append(t0 + poisson_arrivals(st.rate, duration=st.duration, seed=rng))
        t0 += st.duration
    return np.concatenate(out) if out else np.zeros(0)
