"""No batching: every execution runs exactly one request (a model without ``dynamic_batching``).

With deterministic service this is the M/D/c queue (M/D/1 with one instance), the baseline the
batching chapters compare against.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .dynamic import simulate_dynamic
from .results import SimResult
from .service import BatchService


def simulate_nobatch(
    arrivals: np.ndarray | Sequence[float],
    service: BatchService,
    instances: int = 1,
    warmup: float = 0.1,
) -> SimResult:
    """One request per execution, FIFO, on ``instances`` instances; service time ``service.time(1)``."""
    res = simulate_dynamic(arrivals, service, max_batch_size=1, instances=instances, warmup=warmup)
    res.scheduler = "nobatch"
    res.config = dict(instances=res.instances, service=repr(service))
    return res
