"""Lab 6 checks: full marks for the right answers, Chinese diagnoses for typical wrong ones."""

from __future__ import annotations

import math

from batchlab.theory import roofline as rl

from lab_solutions import solution_namespace

SOL = solution_namespace("lab6")
from batchlab.labs.lab6 import check_knee, check_ridge_batch, check_roofline_time


def test_roofline_time_right(capsys) -> None:
    r = check_roofline_time(SOL["roofline_time"])
    assert r.passed and "[score] lab6.q1 3/3" in capsys.readouterr().out


def test_roofline_time_sum_instead_of_max(capsys) -> None:
    r = check_roofline_time(lambda b, p, s, bw, f: p * s / bw + 2 * p * b / f)
    out = capsys.readouterr().out
    assert not r.passed and "相加" in out and "max" in out


def test_roofline_time_missing_factor_two(capsys) -> None:
    r = check_roofline_time(lambda b, p, s, bw, f: max(p * s / bw, p * b / f))
    out = capsys.readouterr().out
    assert r.score == 2 and "2 FLOP" in out


def test_roofline_time_bytes_grow_with_batch(capsys) -> None:
    r = check_roofline_time(lambda b, p, s, bw, f: max(p * s * b / bw, 2 * p * b / f))
    out = capsys.readouterr().out
    assert not r.passed and "不随 batch 增长" in out


def test_roofline_time_raises(capsys) -> None:
    def broken(*args):
        raise ZeroDivisionError("division by zero")
    r = check_roofline_time(broken)
    out = capsys.readouterr().out
    assert r.score == 0 and "抛出了 ZeroDivisionError" in out and "[score] lab6.q1 0/3" in out


def test_roofline_time_wrong_type(capsys) -> None:
    r = check_roofline_time(lambda *a: "fast")
    out = capsys.readouterr().out
    assert r.score == 0 and "应该返回一个数" in out


def test_ridge_batch_right_and_wrong(capsys) -> None:
    assert check_ridge_batch(SOL["ridge_batch"]).passed
    capsys.readouterr()
    r = check_ridge_batch(lambda bw, f, s: f / bw)  # forgot s/2: right for bf16 only
    out = capsys.readouterr().out
    assert r.score == 2 and "屋脊点本身" in out
    r = check_ridge_batch(lambda bw, f, s: bw / f)
    assert r.score == 0 and "倒数" in capsys.readouterr().out


def test_knee_right_and_wrong(capsys) -> None:
    assert check_knee(SOL["knee_from_sweep"]).passed
    capsys.readouterr()
    r = check_knee(lambda b, t: 64.0)  # never says "still flat"
    out = capsys.readouterr().out
    assert r.score == 2 and "math.inf" in out
    r = check_knee(lambda b, t: math.nan)
    assert r.score == 0 and "NaN" in capsys.readouterr().out


def test_calling_the_course_library_is_no_answer(capsys) -> None:
    for check, fn in ((check_roofline_time, rl.roofline_time), (check_ridge_batch, rl.ridge_batch),
                      (check_knee, rl.knee_batch),
                      (check_knee, lambda b, s: rl.knee_batch(b, s))):   # wrapped in the learner's own function
        r = check(fn)
        assert r.score == 0 and "课程库里现成的" in capsys.readouterr().out
