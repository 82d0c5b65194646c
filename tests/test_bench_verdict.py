"""A benchmark claims its goal only when the machine was quiet (other processes <= 0.3 core)."""

from __future__ import annotations

import pytest

from batchlab.bench.common import BUSY_CORES, verdict


@pytest.mark.parametrize("other, met, claimed, busy", [
    (0.0, True, True, False),
    (BUSY_CORES, True, True, False),
    (0.31, True, False, True),
    (1.7, False, False, True),
    (0.1, False, False, False),
])
def test_goal_is_claimed_only_on_a_quiet_machine(other: float, met: bool, claimed: bool, busy: bool) -> None:
    v = verdict(met, {"cpu_cores_used_by_other_processes": other})
    assert v["goal_met"] is claimed and v["goal_met_as_measured"] is met and v["machine_busy"] is busy
    assert v["busy_threshold_cores"] == BUSY_CORES
    assert ("machine busy" in v["goal_verdict"]) is busy
    assert f"{other:.2f}" in v["goal_verdict"]


def test_unmeasured_load_claims_nothing() -> None:
    v = verdict(True, {"cpus": 2})
    assert v["goal_met"] is False and v["machine_busy"] is True and "not measured" in v["goal_verdict"]
    assert v["goal_met_as_measured"] is True


def test_busy_verdict_says_what_the_figures_would_say() -> None:
    assert "would be met" in verdict(True, {"cpu_cores_used_by_other_processes": 2.0})["goal_verdict"]
    assert "would be not met" in verdict(False, {"cpu_cores_used_by_other_processes": 2.0})["goal_verdict"]
