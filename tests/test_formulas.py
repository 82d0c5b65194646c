"""The article's formulas and the queueing results, checked by numbers."""

import math

import numpy as np
import pytest

from batchlab.theory import formulas as F


def test_article_examples() -> None:
    # 拼锅: three orders, 10 min alone, 18 min together -> 6 min each, S = 30/18.
    assert F.speedup(3, 10, 18) == pytest.approx(30 / 18)
    assert F.padding_efficiency([10, 20, 40]) == pytest.approx(70 / 120)
    assert F.amdahl(0.9, 8) == pytest.approx(1 / (0.1 + 0.9 / 8))
    assert F.amdahl_ceiling(0.9) == pytest.approx(10)
    assert F.cost_per_request(3.6, 3600, 1000) == pytest.approx(0.0036)
    assert F.heavy_load_wait(32, 0.01, 8) == pytest.approx(0.04)


def test_affine_speedup_is_amdahl_with_f_from_a_and_b() -> None:
    a, b = 3.0, 0.5
    f = F.amdahl_f_from_affine(a, b)
    for bs in (1, 2, 8, 64, 1024):
        assert F.affine_speedup(bs, a, b) == pytest.approx(F.amdahl(f, bs))
        assert F.speedup(bs, a + b, F.affine_batch_time(bs, a, b)) == pytest.approx(F.affine_speedup(bs, a, b))
    assert F.amdahl_ceiling(f) == pytest.approx((a + b) / b)


def test_fits_recover_parameters() -> None:
    bs = np.array([1, 2, 4, 8, 16, 32])
    a, b = F.fit_affine(bs, 2.0 + 0.25 * bs)
    assert (a, b) == (pytest.approx(2.0), pytest.approx(0.25))
    f = F.fit_amdahl_f(bs, [F.amdahl(0.8, x) for x in bs])
    assert f == pytest.approx(0.8)


def test_fit_affine_weights_and_non_negative_options() -> None:
    # two points on t = 1 + B and one outlier at B = 4: the weights decide how far it pulls the line
    bs, t = [1, 2, 4], [2.0, 3.0, 9.0]
    assert F.fit_affine(bs, t) == (pytest.approx(-1.0), pytest.approx(17 / 7))   # by hand: normal equations
    assert F.fit_affine(bs, t, weights=[1, 1, 0]) == (pytest.approx(1.0), pytest.approx(1.0))  # outlier ignored
    assert F.fit_affine(bs, t, weights=[2, 2, 2]) == (pytest.approx(-1.0), pytest.approx(17 / 7))
    # a < 0 with nonneg: refit through the origin, b = Σxy / Σx² = (2 + 6 + 36) / 21
    assert F.fit_affine(bs, t, nonneg=True) == (0.0, pytest.approx(44 / 21))
    assert F.fit_affine([1, 2], [3.0, 1.0], nonneg=True) == (pytest.approx(5.0), 0.0)   # falling: b kept at 0
    with pytest.raises(ValueError, match="two"):
        F.fit_affine([1], [1.0])
    with pytest.raises(ValueError, match="equal length"):
        F.fit_affine([1, 2], [1.0, 2.0], weights=[1.0])


def test_relative_error() -> None:
    assert F.relative_error(11.0, 10.0) == pytest.approx(0.1)
    assert F.relative_error(9.0, 10.0) == pytest.approx(-0.1)
    assert math.isnan(F.relative_error(1.0, 0.0))


def test_queueing() -> None:
    assert F.md1_wait(0.5, 1.0) == pytest.approx(0.5)           # ρ/(2μ(1−ρ)) = 0.5/(2·0.5)
    with pytest.raises(ValueError, match="unstable"):
        F.md1_wait(2.0, 1.0)


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="f must lie"):
        F.amdahl(1.5, 4)
    with pytest.raises(ValueError, match="positive"):
        F.padding_efficiency([])
    assert math.isinf(F.amdahl_ceiling(1.0))
