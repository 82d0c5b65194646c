"""One record per request (times in seconds on `time.perf_counter`, from the start of the measured
phase), and their columns. A failed request keeps Triton's error message.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

REJECTION_MARKERS = ("exceeds maximum queue size", "request timeout expired", "rejected")
"""Lower-case fragments of Triton's messages when the scheduler refuses a request."""

TIMES = ("scheduled", "sent", "first", "last")  # The time columns (seconds), shifted together.


@dataclass
class RequestRecord:
    """What the client saw of one request (a unary call, a stream, or a whole sequence)."""

    index: int
    sent: float
    scheduled: float = math.nan
    first: float = math.nan
    last: float = math.nan
    tokens: int = 0
    error: str | None = None
    responses: int = 0
    token_times: list[float] | None = None

    def add_token(self, t: float) -> None:
        """Count one response carrying a token that arrived at `t`."""
        if self.tokens == 0:
            self.first = t
        self.last = t
        self.tokens += 1
        self.responses += 1
        if self.token_times is not None:
            self.token_times.append(t)


def is_rejection(message: str | None) -> bool:
    """True when `message` is Triton's scheduler refusing a request (queue full or timed out)."""
    if not message:
        return False
    low = message.lower()
    return any(m in low for m in REJECTION_MARKERS)


@dataclass
class Records:
    """Column arrays of many `RequestRecord`s (a dict of arrays is the course's table format)."""

    index: np.ndarray
    scheduled: np.ndarray
    sent: np.ndarray
    first: np.ndarray
    last: np.ndarray
    tokens: np.ndarray
    responses: np.ndarray
    error: list[str | None]
    token_times: list[list[float] | None] = field(default_factory=list)

    @classmethod
    def from_list(cls, records: Iterable[RequestRecord]) -> "Records":
        """Columns from a list of records, ordered by request index."""
        rs = sorted(records, key=lambda r: r.index)
        cols = {a: np.array([getattr(r, a) for r in rs], dtype=float if a in TIMES else np.int64)
                for a in ("index", *TIMES, "tokens", "responses")}
        return cls(**cols, error=[r.error for r in rs], token_times=[r.token_times for r in rs])

    def __len__(self) -> int:
        return len(self.index)

    @classmethod
    def concat(cls, parts: "list[Records]", offsets: "list[float]") -> "Records":
        """Records of several runs one after another: indices renumbered, times shifted by `offsets`."""
        bases = np.cumsum([0] + [int(p.index.max()) + 1 if len(p) else 0 for p in parts[:-1]])
        cols = {a: np.concatenate([getattr(p, a) + (o if a in TIMES else 0) for p, o in zip(parts, offsets)])
                for a in (*TIMES, "tokens", "responses")}
        return cls(index=np.concatenate([p.index + b for p, b in zip(parts, bases)]), **cols,
                   error=[e for p in parts for e in p.error],
                   token_times=[None if t is None else [x + o for x in t]
                                for p, o in zip(parts, offsets) for t in (p.token_times or [None] * len(p))])

    @property
    def ok(self) -> np.ndarray:
        """Boolean mask of requests answered without error."""
        return np.array([e is None for e in self.error], dtype=bool)

    @property
    def rejected(self) -> np.ndarray:
        """Boolean mask of requests the server's scheduler refused (queue full / timeout)."""
        return np.array([is_rejection(e) for e in self.error], dtype=bool)

    @property
    def latency(self) -> np.ndarray:
        """Seconds from send to the last response (NaN for failed requests)."""
        return np.where(self.ok, self.last - self.sent, np.nan)

    @property
    def ttft(self) -> np.ndarray:
        """Seconds from send to the first response (time to first token)."""
        return np.where(self.ok, self.first - self.sent, np.nan)

    @property
    def tpot(self) -> np.ndarray:
        """Mean seconds per token after the first (NaN where a request returned < 2 tokens)."""
        n = self.tokens - 1
        with np.errstate(invalid="ignore", divide="ignore"):
            per = (self.last - self.first) / np.where(n > 0, n, np.nan)
        return np.where(self.ok, per, np.nan)

    @property
    def lateness(self) -> np.ndarray:
        """Seconds each open-loop send left after its scheduled time (NaN for closed loop)."""
        return self.sent - self.scheduled

    def inter_token(self) -> np.ndarray:
        """All gaps between consecutive tokens of successful streams (seconds), pooled."""
        gaps = [np.diff(t) for t, e in zip(self.token_times, self.error) if t and e is None and len(t) > 1]
        return np.concatenate(gaps) if gaps else np.zeros(0)

    def errors(self) -> dict[str, int]:
        """Error kinds (numbers masked) and how often each occurred, most frequent first."""
        c = Counter(re.sub(r"\d+", "N", e)[:200] for e in self.error if e is not None)
        return dict(c.most_common())
