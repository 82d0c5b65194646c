"""Chapter 11's speculative-decoding module (`batchlab.course.speculative`): the expected tokens per
step, what a stream's responses say (steps, drafted and accepted, server-side TPOT), the acceptance
figures on hand-made steps, the gain table, and one short round on the real server."""

from __future__ import annotations

import numpy as np
import pytest

from batchlab.course import llm_serving as L
from batchlab.course import speculative as S
from batchlab.lm import ToyLM, generate
from batchlab.lm.config import LMConfig
from batchlab.theory import formulas as F


def test_expected_tokens_per_step():
    assert F.speculative_tokens_per_step(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert F.speculative_tokens_per_step(0.0, 4) == 1.0 and F.speculative_tokens_per_step(1.0, 4) == 5.0
    assert F.speculative_tokens_per_step(0.8, 0) == pytest.approx(1.0)
    for alpha, k in ((1.2, 3), (-0.1, 3), (0.5, -1), (0.5, 1.5)):
        with pytest.raises(ValueError):
            F.speculative_tokens_per_step(alpha, k)


def response(token, t_ns, drafted=None, **final):
    r = {"TOKEN": np.array([token]), "T_NS": np.array([t_ns])}
    if drafted is not None:
        r["DRAFTED"] = np.array([drafted])
    return r | {k: np.array([v]) for k, v in final.items()}


def test_a_streams_steps_come_from_its_t_ns_stamps():
    # prefill at 1 ms; a step verifying 3 drafts emits 3 tokens (2 accepted); one with 3, 0 accepted; a
    # last step verifying 1 (max_tokens left no room for more) emits 2
    stream = [response(5, 1_000_000, 0), response(6, 3_000_000, 3), response(7, 3_000_000, 3),
              response(8, 3_000_000, 3), response(9, 5_000_000, 3), response(4, 7_000_000, 1),
              response(3, 7_000_000, 1, DRAFTED_TOKENS=7, ACCEPTED_TOKENS=3), {}]
    got = S.request_figures(stream)
    assert got["tokens"] == [5, 6, 7, 8, 9, 4, 3] and got["n_steps"] == 4
    assert got["steps"] == [(3, 2), (3, 0), (1, 1)] and (got["drafted"], got["accepted"]) == (7, 3)
    assert got["tpot_ms"] == pytest.approx(6.0 / 6)
    stream[-2] = response(3, 7_000_000, 1, DRAFTED_TOKENS=7, ACCEPTED_TOKENS=4)
    with pytest.raises(RuntimeError, match="do not add up to the server's totals"):
        S.request_figures(stream)


def test_a_stream_without_speculation_has_one_token_a_step():
    got = S.request_figures([response(5, 10), response(6, 20), response(7, 40)])
    assert got["steps"] == [] and got["n_steps"] == 3 and got["drafted"] == got["accepted"] == 0


def test_acceptance_on_hand_made_steps():
    steps = [(3, 3), (3, 0), (3, 1), (3, 3), (2, 2), (0, 0)]   # only steps with k = 3 drafts count
    a = S.acceptance(steps, k=3)
    assert a["steps"] == 4 and a["acceptance_rate"] == pytest.approx(7 / 12)
    assert a["alpha"] == pytest.approx(7 / 9)              # 7 accepted, 2 first mismatches judged
    assert a["alpha_first"] == pytest.approx(3 / 4) and a["tokens_per_step"] == pytest.approx(11 / 4)
    assert a["predicted"] == pytest.approx(F.speculative_tokens_per_step(7 / 9, 3))
    assert a["predicted_at_rate"] < a["tokens_per_step"]   # the rate is not the formula's α
    assert a["spread"] == [0.25, 0.25, 0.0, 0.5] and sum(a["independent"]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no step verified 4 draft tokens"):
        S.acceptance(steps, k=4)


def test_gain_table_and_same_tokens():
    rows = [{"round": r, "concurrency": c, "model": m, "tpot_ms": t, "tokens": [[1, 2]]}
            for r in range(3) for c in (1, 8)
            for m, t in (("lm_wide", 20.0 if c == 1 else 40.0), ("lm_wide_spec", 10.0 + r if c == 1 else 36.0))]
    g = {row["concurrency"]: row for row in S.tpot_gain(rows, "lm_wide_spec")}
    assert g[1]["gain_rounds"] == pytest.approx([2.0, 20 / 11, 20 / 12]) and g[1]["gain"] == pytest.approx(20 / 11)
    assert g[8]["gain"] == pytest.approx(40 / 36) and g[1]["tpot_spec_ms"] == 11.0
    assert S.same_tokens(rows)
    rows[-1]["tokens"] = [[1, 3]]
    assert not S.same_tokens(rows)


def test_the_variants_are_the_decode_width_with_and_without_speculation(tmp_path):
    assert LMConfig(d_model=int(S.WIDE["d_model"]), d_ff=int(S.WIDE["d_ff"])).d_model == 512
    L.stage_variants(tmp_path, S.VARIANTS)
    for name, params in S.VARIANTS.items():
        text = (tmp_path / name / "config.pbtxt").read_text(encoding="utf-8")
        for k, v in params.items():
            assert f'key: "{k}"' in text and f'string_value: "{v}"' in text, (name, k)
    assert S.VARIANTS["lm_wide_spec"]["num_speculative_tokens"] == str(S.K)


@pytest.mark.server
def test_a_short_round_on_the_server_keeps_the_tokens_and_reads_the_servers_counts():
    models = ("lm_wide", "lm_wide_spec")
    with S.spec_server({m: S.VARIANTS[m] for m in models}) as server:
        rows = S.spec_rounds(server, models, concurrencies=(1, 4), rounds=1, max_tokens=16, prompts_per_round=1)
    assert S.same_tokens(rows) and len(rows) == 4
    lm = ToyLM(LMConfig(d_model=512, d_ff=2048))
    one = next(r for r in rows if r["concurrency"] == 1 and r["model"] == "lm_wide_spec")
    assert one["tokens"] == [generate(lm, L.token_prompt(16, 0), 16, ignore_eos=True)]
    spec = [r for r in rows if r["model"] == "lm_wide_spec"]
    assert all(r["drafted"] > 0 and r["tokens_per_step"] > 1 for r in spec)
    assert all(sum(d for d, _ in r["steps"]) == r["drafted"] for r in spec)
    assert all(r["tokens_per_step"] == 1.0 and r["drafted"] == 0 for r in rows if r["model"] == "lm_wide")
