"""batchlab.sim's dynamic batcher against an independent SimPy model (tests/simpy_dynamic.py).

The issue asks for agreement on mean latency within 3 %; both implement the same rule on the
same arrivals, so they in fact agree to float rounding, which is also checked.
"""

import numpy as np
import pytest

import simpy_dynamic
from batchlab.sim import workload as wl
from batchlab.sim.dynamic import simulate_dynamic
from batchlab.sim.service import Affine

CASES = [
    dict(M=1, D=0, P=(), K=1, base=0, per=400, arrivals=("poisson", 2000.0)),
    dict(M=8, D=500, P=(), K=1, base=300, per=100, arrivals=("poisson", 4000.0)),
    dict(M=16, D=200, P=(4, 8), K=2, base=300, per=100, arrivals=("poisson", 6000.0)),
    dict(M=8, D=0, P=(), K=3, base=500, per=50, arrivals=("mmpp", None)),
    dict(M=32, D=2000, P=(), K=1, base=1000, per=20, arrivals=("poisson", 8000.0)),
    dict(M=8, D=1000, P=(2, 4), K=1, base=200, per=150, arrivals=("on_off", None)),
]


def arrivals(kind, rate, n=25_000):
    if kind == "poisson":
        return wl.poisson(rate, n, seed=21)
    if kind == "mmpp":
        return wl.mmpp((15_000.0, 2_000.0), (0.02, 0.05), n, seed=22)
    return wl.on_off(6000.0, 0.05, 0.05, n, seed=23)


@pytest.mark.parametrize("c", CASES, ids=lambda c: f"M{c['M']}-D{c['D']}-P{len(c['P'])}-K{c['K']}-{c['arrivals'][0]}")
def test_agrees_with_simpy(c):
    a = arrivals(*c["arrivals"])
    s_start, s_finish = simpy_dynamic.simulate(a, c["base"], c["per"], c["M"], c["D"], c["P"], c["K"])
    res = simulate_dynamic(a, Affine(c["base"], c["per"]), c["M"], c["D"], c["P"], c["K"])
    ours = np.mean(res.records["finish"] - a)
    theirs = np.mean(s_finish - a)
    assert ours == pytest.approx(theirs, rel=0.03)
    assert ours == pytest.approx(theirs, rel=1e-9)
    assert np.allclose(res.records["start"], s_start, rtol=0, atol=1e-9)
    assert res.summary()["batch_size_mean"] > (1.0 if c["M"] > 1 else 0.99)
