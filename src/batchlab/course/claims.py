"""Claims a chapter's prose makes about a run, checked in the cell that made the data.

Each call prints one Chinese line, `✓ 连续批处理是请求级的 1.8 倍（要求 ≥ 1.5）` or the same with ✗.
Under the test suite and when outputs are stored (`BATCHLAB_CLAIMS=strict`) a ✗ raises
`ClaimFailed`, so a notebook whose run does not show what its prose says fails.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

#: Set to "strict" (tests/conftest.py, `nbtools execute`) to make a claim that does not hold an error.
STRICT_ENV = "BATCHLAB_CLAIMS"


class ClaimFailed(AssertionError):
    """A claim the prose makes did not hold on this run."""


def _num(x: float) -> str:
    """A number as the prose writes it: integers whole, others with three significant digits."""
    x = float(x)
    return f"{x:,.0f}" if x.is_integer() and abs(x) >= 1 else f"{x:.3g}"


def claim(statement: str, ok: bool, need: str = "", hint: str = "") -> bool:
    """Print `✓ statement（need）` or `✗ …`; a ✗ raises `ClaimFailed` when claims are strict.

    `statement` says what the run shows, with its numbers; `need` the condition checked; `hint`
    (printed only with ✗) what a learner whose run disagrees should look at.
    """
    line = f"{'✓' if ok else '✗'} {statement}" + (f"（{need}）" if need else "")
    if not ok and hint:
        line += f"\n  可能的原因：{hint}"
    print(line)
    if not ok and os.environ.get(STRICT_ENV) == "strict":
        raise ClaimFailed(line)
    return bool(ok)


def at_least(statement: str, value: float, bound: float, hint: str = "") -> bool:
    """Claim `value ≥ bound`; `statement` may hold `{value}` (formatted as the prose writes numbers)."""
    return claim(statement.format(value=_num(value)), value >= bound, f"要求 ≥ {_num(bound)}", hint)


def at_most(statement: str, value: float, bound: float, hint: str = "") -> bool:
    """Claim `value ≤ bound`."""
    return claim(statement.format(value=_num(value)), value <= bound, f"要求 ≤ {_num(bound)}", hint)


def between(statement: str, value: float, low: float, high: float, hint: str = "") -> bool:
    """Claim `low ≤ value ≤ high` (an "about 35 %" is a band around 35 %)."""
    need = f"要求在 {_num(low)} 到 {_num(high)} 之间"
    return claim(statement.format(value=_num(value)), low <= value <= high, need, hint)


def rising(statement: str, values: Sequence[float], strict: bool = True, hint: str = "") -> bool:
    """Claim the values grow from each to the next (`strict=False`: never fall)."""
    return _trend(statement, values, 1.0, strict, hint)


def falling(statement: str, values: Sequence[float], strict: bool = True, hint: str = "") -> bool:
    """Claim the values shrink from each to the next (`strict=False`: never grow)."""
    return _trend(statement, values, -1.0, strict, hint)


def _trend(statement: str, values: Sequence[float], sign: float, strict: bool, hint: str) -> bool:
    steps = [sign * (b - a) for a, b in zip(values, values[1:])]
    ok = all(d > 0 if strict else d >= 0 for d in steps)
    word = ("变大" if strict else "不减") if sign > 0 else ("变小" if strict else "不增")
    return claim(statement.format(value=" → ".join(_num(v) for v in values)), ok, f"要求逐个{word}", hint)
