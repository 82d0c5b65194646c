"""Triton's dynamic-batcher decision, `next_batch` (``GetDynamicBatch`` in core ``src/dynamic_batch_scheduler.cc``),
and its settings, `BatchRule`; the queue policy, `QueuePolicy`.

Decisions are taken when an instance can take work. Triton forms the next batch while every
instance is busy (server PR #3789) and may still add to it before an instance takes it, so the two
differ on a busy instance with preferred sizes set:
- with a delay, a batch closed at a preferred size takes one more request (the first request past
  the largest preferred size marks a best size of 0, the next one 1); Lab 2's recordings show
  max 12, preferred [3], 150 ms -> [3, 4, 4, ...] where `next_batch` gives [3, 3, 3, ...];
- with delay 0 and several preferred sizes, a batch grown one arrival at a time closes at the
  first preferred size it reaches, where `next_batch` sends the largest one pending.
With a long queue (overload) a new batch starts from a full queue and the two agree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from batchlab._validate import choice, integer, non_negative
from batchlab.config_pbtxt import edit_config, to_text

from .engine import INF


class QueuedRequest(NamedTuple):
    """A request waiting in the dynamic batcher's queue."""

    arrival: float     # when it entered the queue (s)
    elements: int = 1  # its batch dimension: the batch elements it adds to a batch
    priority: int = 1  # its priority level (1 = highest)
    id: int = 0        # which request it is (its index in the run)


class Decision(NamedTuple):
    """What the batcher does now: send the first ``send`` pending requests as one batch, or, when
    ``send`` is 0, look again at ``wake_at`` (or at the next arrival, if that comes first)."""

    send: int
    wake_at: float


def next_batch(pending: Iterable[QueuedRequest], now: float, rule: BatchRule) -> Decision:
    """Triton's dynamic-batcher decision (``GetDynamicBatch``, core ``src/dynamic_batch_scheduler.cc``).

    ``pending``: the queue in the order Triton takes requests (priority level 1 first, FIFO within
    a level); a batch is always its first requests. ``rule``: the settings (`BatchRule`), with
    ``effective_preferred`` (the preferred sizes, or [max_batch_size] when none are set), their
    largest ``max_preferred`` and ``delay_s`` (max_queue_delay in seconds). Asked whenever an
    instance can take a batch: at an arrival, when an instance frees, at a wake-up.
    """
    elements = 0   # batch elements in the batch being formed (Triton counts these, not requests)
    count = 0      # requests in it
    preferred = 0  # requests in the best batch of a preferred size seen so far (0: none yet)
    oldest = INF   # the earliest arrival among them: the delay runs from it
    for request in pending:
        grown = elements + request.elements
        # The request would jump past the largest preferred size before any was reached (e.g.
        # requests of 3 elements, preferred [4]): the batch as it stands becomes the best one.
        if count and not preferred and grown > rule.max_preferred:
            preferred = count
        # It does not fit under max_batch_size: the batch is full (`send_now`). The requests behind
        # it wait too, even smaller ones: the batch is always the front of the queue.
        if grown > rule.max_batch_size:
            break
        elements = grown
        count += 1
        oldest = min(oldest, request.arrival)
        if elements in rule.effective_preferred:
            preferred = count
    if count == 0:  # nothing pending (Triton rejects a request larger than max_batch_size on arrival)
        return Decision(0, INF)
    deadline = oldest + rule.delay_s
    # A delay of 0 never counts as exceeded (`pending_batch_delay_ns_ != 0` in `delay_is_exceeded`).
    delay_exceeded = rule.delay_s > 0 and now >= deadline
    # 1. A preferred size is reachable and the oldest is within the delay: send it at once
    #    (7 pending, preferred [4, 8]: 4 go, 3 stay). With delay 0 this rule still comes first.
    if preferred and not delay_exceeded:
        return Decision(preferred, now)
    # 2. The delay has expired (the preferred rule is then skipped), there is no delay, or the batch
    #    has reached the largest preferred size: send everything that fits.
    if delay_exceeded or rule.delay_s == 0 or elements >= rule.max_preferred:
        return Decision(count, now)
    # 3. Otherwise wait: an arrival may still make a preferred size before the oldest's deadline.
    return Decision(0, deadline)


@dataclass(frozen=True, order=True)
class BatchRule:
    """One dynamic-batcher setting: ``max_batch_size``, ``preferred`` (sorted, possibly empty),
    ``max_queue_delay_us`` and ``instances`` (``instance_group.count``). ``effective_preferred`` is
    what Triton uses (empty means ``[max_batch_size]``); `next_batch` takes the decisions.
    """

    max_batch_size: int
    preferred: tuple[int, ...] = ()
    max_queue_delay_us: float = 0.0
    instances: int = 1
    effective_preferred: tuple[int, ...] = field(init=False, repr=False, compare=False)
    max_preferred: int = field(init=False, repr=False, compare=False)
    delay_s: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        m = integer("max_batch_size", self.max_batch_size, lo=1)
        pref = _preferred_sizes(self.preferred, m)
        d = non_negative("max_queue_delay_us", self.max_queue_delay_us)
        k = integer("instances", self.instances, lo=1)
        eff = pref or (m,)
        for name, value in (("max_batch_size", m), ("max_queue_delay_us", d), ("preferred", pref),
                            ("instances", k), ("effective_preferred", eff), ("max_preferred", eff[-1]),
                            ("delay_s", d * 1e-6)):
            object.__setattr__(self, name, value)

    def overload_batch(self) -> int:
        """The batch size sent when the queue is long: max preferred with delay 0, else max_batch_size."""
        return self.max_preferred if self.delay_s == 0.0 else self.max_batch_size

    def full_batch_capacity(self, service: Any) -> float:
        """Requests/s the instances serve when the queue is long (batches of the size then sent)."""
        b = self.overload_batch()
        return self.instances * b / float(service.time(b))

    @property
    def label(self) -> str:
        """Short text such as ``B=16 d=2000us pref=[8,16] x2``."""
        s = f"B={self.max_batch_size} d={self.max_queue_delay_us:g}us"
        if self.preferred:
            s += " pref=[" + ",".join(map(str, self.preferred)) + "]"
        if self.instances > 1:
            s += f" x{self.instances}"
        return s

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict."""
        return {"max_batch_size": self.max_batch_size, "max_queue_delay_us": self.max_queue_delay_us,
                "preferred": list(self.preferred), "instances": self.instances}

    def to_pbtxt(self, base_text: str, name: str | None = None) -> str:
        """``base_text`` (a model's config.pbtxt) with this config's fields written in (comments not kept)."""
        changes: dict[str, Any] = {} if name is None else {"name": name}
        changes["max_batch_size"] = self.max_batch_size
        changes["dynamic_batching.max_queue_delay_microseconds"] = int(round(self.max_queue_delay_us))
        changes["dynamic_batching.preferred_batch_size"] = list(self.preferred)
        changes["instance_group.0.count"] = self.instances
        return to_text(edit_config(base_text, changes))

    def apply(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of a model configuration in JSON form (the server's ``get_model_config``) with
        this config's batcher fields, for a ``load_model(config=...)`` override."""
        cfg = json.loads(json.dumps(dict(config)))
        cfg["max_batch_size"] = int(self.max_batch_size)
        db = dict(cfg.get("dynamic_batching") or {})
        db.pop("preferred_batch_size", None)
        db.pop("max_queue_delay_microseconds", None)
        if self.preferred:
            db["preferred_batch_size"] = [int(p) for p in self.preferred]
        if self.max_queue_delay_us:
            db["max_queue_delay_microseconds"] = int(round(self.max_queue_delay_us))
        cfg["dynamic_batching"] = db
        return cfg


def _preferred_sizes(preferred: Sequence[int] | int | None, max_batch_size: int) -> tuple[int, ...]:
    """Sorted unique preferred sizes, each in ``[1, max_batch_size]`` (may be empty)."""
    if preferred is None:
        preferred = ()
    if isinstance(preferred, (int, np.integer)) and not isinstance(preferred, bool):
        preferred = (preferred,)
    sizes = sorted({integer("preferred_batch_sizes entry", p, lo=1) for p in preferred})
    if sizes and sizes[-1] > max_batch_size:
        raise ValueError(
            f"preferred_batch_sizes entry {sizes[-1]} exceeds max_batch_size {max_batch_size}"
        )
    return tuple(sizes)


@dataclass(frozen=True)
class QueuePolicy:
    """Triton's ``ModelQueuePolicy``: ``max_queue_size`` (0 = unbounded), ``timeout_us`` (0 = none) and
    ``timeout_action`` (REJECT drops a request that waited longer; DELAY moves it behind its level's
    other requests, never to time out again)."""

    max_queue_size: int = 0
    timeout_us: float = 0.0
    timeout_action: str = "REJECT"

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_queue_size", integer("max_queue_size", self.max_queue_size, lo=0))
        object.__setattr__(self, "timeout_us", non_negative("default_timeout_us", self.timeout_us))
        object.__setattr__(self, "timeout_action",
                           choice("timeout_action", self.timeout_action, ("REJECT", "DELAY")))

    @property
    def is_default(self) -> bool:
        """True when the policy never rejects, times out or reorders."""
        return self.max_queue_size == 0 and self.timeout_us == 0.0
