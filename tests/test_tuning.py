"""Grid search under an SLO with the simulator (batchlab.course.tuning), on `batchlab.sim.BatchRule`."""

from __future__ import annotations

import numpy as np
import pytest

from batchlab.config_pbtxt import load_config_text, parse_config, with_batcher
from batchlab.theory.queueing import batch_queue
from batchlab.sim.service import Affine
from batchlab.batching import BatchRule
from batchlab.course.tuning import (
    as_matrix,
    capacity_under_slo,
    config_grid,
    evaluate,
    search,
    sweep,
    unit_arrivals,
    wait_formulas,
)

SVC = Affine(base_us=3000, per_item_us=500)


def test_config_validation_is_one_clear_error():
    with pytest.raises(ValueError, match="max_batch_size"):
        BatchRule(0)
    with pytest.raises(ValueError, match="preferred"):
        BatchRule(8, preferred=(16,))
    with pytest.raises(ValueError, match="max_queue_delay_us"):
        BatchRule(8, max_queue_delay_us=-1)
    with pytest.raises(ValueError, match="instances"):
        BatchRule(8, instances=0)
    assert BatchRule(8, preferred=(8, 4, 4)).preferred == (4, 8)


def test_grid_skips_impossible_preferred_sizes():
    grid = config_grid([4, 16], [0, 1000], preferred=[(), (8, 16)])
    assert all(not c.preferred or c.max_batch_size == 16 for c in grid)
    assert len(grid) == 2 * 2 + 1 * 2


def test_with_batcher_is_what_triton_reads():
    base = load_config_text("embed")
    cfg = BatchRule(16, (8, 16), 2500, 2)
    msg = parse_config(with_batcher(base, cfg, name="embed_tuned"))
    assert msg.name == "embed_tuned"
    assert msg.max_batch_size == 16
    assert msg.dynamic_batching.max_queue_delay_microseconds == 2500
    assert list(msg.dynamic_batching.preferred_batch_size) == [8, 16]
    assert msg.instance_group[0].count == 2
    assert msg.input[0].name == "TOKENS"  # the rest of the config is kept


def test_sweep_agrees_with_the_exact_chain():
    rate = 600.0
    row = sweep([BatchRule(8)], SVC, rate, n_requests=30_000, seed=3)[0]
    exact = batch_queue(rate, SVC, 8)
    assert row["mean_ms"] == pytest.approx(exact.latency_s * 1e3, rel=0.05)
    assert row["batch_size_mean"] == pytest.approx(exact.batch_mean, rel=0.03)


def test_common_random_numbers_make_runs_reproducible():
    a = evaluate(BatchRule(8, max_queue_delay_us=1000), SVC, 300.0, n_requests=2000, seed=5)
    b = evaluate(BatchRule(8, max_queue_delay_us=1000), SVC, 300.0, n_requests=2000, seed=5)
    assert a["p99_ms"] == b["p99_ms"]
    u = unit_arrivals(1000, seed=1)
    assert np.all(np.diff(u) > 0) and u.size == 1000


def test_as_matrix_layout():
    rows = sweep(config_grid([2, 8], [0, 5000]), SVC, 200.0, n_requests=1000)
    xs, ys, z = as_matrix(rows, "p99_ms")
    assert xs == [0.0, 5000.0] and ys == [2, 8] and z.shape == (2, 2)
    # a longer delay never shortens the light-load tail here
    assert z[1, 1] >= z[1, 0]
    with pytest.raises(ValueError, match="column"):
        as_matrix(rows, "nonsense")


def test_capacity_under_slo_brackets_the_slo():
    cfg = BatchRule(8)
    res = capacity_under_slo(cfg, SVC, slo_ms=40, percentile=95, n_requests=3000)
    assert 0 < res.rate_rps < cfg.full_batch_capacity(SVC)
    assert res.row["p95_ms"] <= 40 and res.row["stable"]
    failing_above = [r for r, lat, ok in res.scanned if r > res.rate_rps and not ok]
    assert failing_above and min(failing_above) < res.rate_rps * 1.1
    tighter = capacity_under_slo(cfg, SVC, slo_ms=15, percentile=95, n_requests=3000)
    assert tighter.rate_rps < res.rate_rps


def test_impossible_slo_gives_zero():
    res = capacity_under_slo(BatchRule(4), SVC, slo_ms=1.0, n_requests=500, points=4, refine=2)
    assert res.rate_rps == 0.0 and res.row is None and not res.holds_below


def test_search_prefers_batching_and_the_simplest_of_ties():
    grid = config_grid([1, 8, 32], [0, 2000])
    ranked = search(grid, SVC, slo_ms=60, n_requests=2000, points=8, refine=4)
    best = ranked[0]
    assert best.config.max_batch_size > 1
    assert best.config.max_queue_delay_us == 0.0
    no_batch = next(r for r in ranked if r.config.max_batch_size == 1 and r.config.max_queue_delay_us == 0)
    assert best.rate_rps > 2 * no_batch.rate_rps
    assert no_batch.rate_rps < 1 / SVC.time(1)


def test_bad_slo_arguments():
    with pytest.raises(ValueError, match="percentile"):
        capacity_under_slo(BatchRule(4), SVC, slo_ms=10, percentile=97)
    with pytest.raises(ValueError, match="slo_ms"):
        capacity_under_slo(BatchRule(4), SVC, slo_ms=-1)
    with pytest.raises(ValueError, match="rate"):
        evaluate(BatchRule(4), SVC, rate=0)


def test_wait_formulas_little_is_an_identity_and_the_chain_is_exact():
    svc = Affine(base_us=4000, per_item_us=500)
    row = wait_formulas(svc, 16, 0.5, n_requests=20_000)
    assert abs(row["little_ms"] / row["sim_ms"] - 1) < 0.08          # Little's law holds on any run
    assert abs(row["exact_ms"] / row["sim_ms"] - 1) < 0.05           # the chain at the realised rate
    assert row["article_ms"] < row["article_bbar_ms"] and 0 < row["U"] <= 1 and 1 <= row["B"] <= 16
