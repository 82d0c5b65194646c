"""batchlab.course.interview: every interview question tied to a chapter and an experiment."""

from __future__ import annotations

import json
import re

import pytest

from batchlab.course import interview as IE
from batchlab.paths import repo_root
from batchlab.quiz import load_bank

NOTEBOOKS = repo_root() / "notebooks"


def test_every_bank_question_has_evidence():
    assert list(IE.EVIDENCE) == load_bank("interview").ids


def _headings(nb_path) -> set[str]:
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    out = set()
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                m = re.match(r"^#{1,6}\s+(.*)$", line)
                if m:
                    out.add(m.group(1).strip())
    return out


def test_links_point_at_existing_notebooks_and_headings():
    for ev in IE.EVIDENCE.values():
        for nb, heading in ev.links:
            path = NOTEBOOKS / nb
            assert path.is_file(), nb
            if heading:
                assert heading in _headings(path), (nb, heading)


def test_link_markdown_anchor():
    assert IE.link_markdown("09_misconceptions.ipynb", "误区三：a b") == "[09 · 误区三：a b](09_misconceptions.ipynb#误区三：a-b)"
    assert IE.link_markdown("04_tuning.ipynb") == "[04](04_tuning.ipynb)"


# ----------------------------------------------------------------------------- the numbers
# Each `_eN` recomputes, from the course functions `interview._qN` calls (same arguments), the
# numbers its sentence must show, formatted the same way and with enough surrounding text that a
# number cannot match by accident. It also checks the claim those numbers are there to prove.


def _e1() -> list[str]:
    from batchlab.course.presets import EMBED_LIKE as S
    t1, t32 = S.throughput(1), S.throughput(32)
    assert t32 > 2 * t1  # batching multiplies throughput
    return [f"一单一锅 {t1:.0f} 请求/s", f"拼到 32 个 {t32:.0f} 请求/s", f"（×{t32 / t1:.1f}）"]


def _e2() -> list[str]:
    from batchlab.course import cases as C
    assert len(C.TENANTS) == 12
    _, p, o, _ = C.tenant_requests(C.TENANTS, 2.0, 4000, seed=0)
    eta = C.padding_eta(p, o, 8)
    assert 0 < eta < 1  # padding wastes work
    return [f"补齐成一批：η = {eta:.2f}；", "连续批处理不补齐：η = 1.00"]


def _e3() -> list[str]:
    from batchlab.course.misconceptions import delay_sweep
    rows = {r["delay_us"]: r for r in delay_sweep([0, 20000], [0.5], n=8000)}
    a, b = rows[0.0], rows[20000.0]
    assert b["p99_ms"] > a["p99_ms"] and b["throughput_rps"] >= 0.99 * a["throughput_rps"]
    return [f"p99 {a['p99_ms']:.1f} → {b['p99_ms']:.1f} ms",
            f"吞吐 {a['throughput_rps']:.0f} → {b['throughput_rps']:.0f} 请求/s"]


def _e4() -> list[str]:
    from batchlab.course.capacity import toy_kv_accounting
    from batchlab.lm import ToyLM
    lm = ToyLM.default()
    r = toy_kv_accounting(lm, [4], 16, 8)[0]
    cfg = lm.config
    assert r["bytes_per_token"] == 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * 4  # K and V, float32
    assert r["tokens_per_seq"] == 16 + 8 - 1
    assert r["used_bytes"] == r["formula_bytes"] == 4 * r["tokens_per_seq"] * r["bytes_per_token"]
    return [f"4 条序列各 {r['tokens_per_seq']} 个 token", f"× {r['bytes_per_token']:,} B/token",
            f"公式 {r['formula_bytes']:,} B", f"实有 {r['used_bytes']:,} B"]


def _e5() -> list[str]:
    from batchlab.course.engineering import starvation_experiment
    rows = {(x["policy"], x["class"][:3]): x for run in starvation_experiment(n=8000) for x in run.rows}
    lo = "低优先"
    pri, fifo, fifo_d, tmo = (rows[(k, lo)] for k in ("priority", "fifo", "fifo_delay", "priority_timeout"))
    assert pri["queue_p99_ms"] > fifo["queue_p99_ms"]  # priority starves the low class
    assert tmo["queue_max_ms"] <= 200 * 1.05 and tmo["dropped_pct"] > 0  # the timeout bounds the wait
    return [f"低优先级 p99 排队 {pri['queue_p99_ms'] / 1e3:.1f} s",
            f"FIFO {fifo['queue_p99_ms'] / 1e3:.1f} s → {fifo_d['queue_p99_ms'] / 1e3:.1f} s",
            f"最长等 {tmo['queue_max_ms']:.0f} ms", f"（{tmo['dropped_pct']:.0f}% 被拒）"]


def _e6() -> list[str]:
    from batchlab.theory.kv import kv_bytes_for
    from batchlab.course.presets import EMBED_LIKE as S
    assert kv_bytes_for("Llama-3-8B") == 2 * 32 * 8 * 128 * 2  # 32 layers, 8 KV heads, dim 128, fp16
    gib = 64 * 4096 * kv_bytes_for("Llama-3-8B") / 2**30
    assert S.time(128) > S.time(32) and S.throughput(128) >= S.throughput(32)
    return [f"B=32 → 128：{S.time(32) * 1e3:.0f} → {S.time(128) * 1e3:.0f} ms", f"（Llama-3-8B）{gib:.0f} GiB",
            f"容量 {S.throughput(32):.0f} → {S.throughput(128):.0f} 请求/s"]


def _e7() -> list[str]:
    from batchlab.course import seed_demo as sd
    from batchlab.course.seed_redo import ARTICLE_COST, article_workload, redo
    tr = sd.trace_sim(4, 3.0, True, duration=400.0)
    a, L = article_workload(6000, seed=1)
    rows = {r["scheduler"]: r for r in redo(a, L, 4, 3.0, ARTICLE_COST, ("seq", "continuous"), warmup=0.1)}
    assert tr.empty_slot_ticks > 0 and rows["continuous"]["mean_s"] < rows["seq"]["mean_s"]
    return [f"：{100 * tr.empty_slot_ticks / tr.ticks:.0f}% 的 tick", f"只提前返回 {rows['seq']['mean_s']:.1f} s",
            f"（连续批处理）{rows['continuous']['mean_s']:.1f} s"]


def _e8() -> list[str]:
    from batchlab.course.misconceptions import batch_size_sweep
    rows = {r["max_batch_size"]: r for r in batch_size_sweep([4, 8], rate=450, n=6000)}
    assert rows[4]["capacity_rps"] < 450 < rows[8]["capacity_rps"] and not rows[4]["stable"]
    return [f"max_batch_size 4 的容量 {rows[4]['capacity_rps']:.0f}/s，队列失控（p99 {rows[4]['p99_ms'] / 1e3:.1f} s）",
            f"8 的容量 {rows[8]['capacity_rps']:.0f}/s，p99 {rows[8]['p99_ms']:.0f} ms"]


def _e9() -> list[str]:
    from batchlab.config_pbtxt import check_config
    from batchlab.course.presets import LLM_COST
    from batchlab.course.misconceptions import combination_comparison
    err = check_config('max_batch_size: 8\ndynamic_batching { }\nsequence_batching { }')[0]
    rows = {r["scheduler"]: r for r in combination_comparison(2.0, LLM_COST, n=800, overload_rate=30.0)}
    comb, dyn = rows["combined"]["capacity_tokens_per_s"], rows["dynamic_only"]["capacity_tokens_per_s"]
    assert err.level == "error" and comb > dyn
    return [f"→ {err.level}（oneof scheduling_choice）", f"容量 {comb:.0f} token/s", f"请求级拼锅（动态批处理器）{dyn:.0f} token/s"]


def _e10() -> list[str]:
    from batchlab.course.cases import fairness_experiment
    f = {(r["scheduler"], r["tenant"]): r for r in fairness_experiment(n=2000)}
    static, cont = f[("static", "短单")]["p99_s"], f[("continuous", "短单")]["p99_s"]
    assert cont < static
    return [f"短单 p99 {static:.1f} s", f"连续批处理 {cont:.2f} s"]


EXPECTED = {"Q1": _e1, "Q2": _e2, "Q3": _e3, "Q4": _e4, "Q5": _e5,
            "Q6": _e6, "Q7": _e7, "Q8": _e8, "Q9": _e9, "Q10": _e10}


def _missing(expected: list[str], text: str) -> list[str]:
    """The expected fragments `text` does not contain."""
    return [frag for frag in expected if frag not in text]


def test_every_question_has_an_expectation():
    assert list(EXPECTED) == list(IE.EVIDENCE)


@pytest.mark.parametrize("qid", list(IE.EVIDENCE))
def test_each_experiment_returns_its_number(qid):
    """The sentence shows the numbers the library computes now, and the card carries the same sentence."""
    expected = EXPECTED[qid]()
    text = IE.run(qid)
    assert _missing(expected, text) == [], text
    assert f"本次实验：{text}" in IE.answer_card(qid)


@pytest.mark.parametrize("qid", list(IE.EVIDENCE))
def test_each_question_links_an_existing_section(qid):
    ev = IE.EVIDENCE[qid]
    assert any(heading for _, heading in ev.links), "no link names a section"
    for nb, heading in ev.links:
        assert (NOTEBOOKS / nb).is_file(), nb
        if heading:
            assert heading in _headings(NOTEBOOKS / nb), (nb, heading)
    card = IE.answer_card(qid, run_experiment=False)
    row = next(r for r in IE.evidence_rows(run_experiments=False) if r["题号"] == qid)
    for nb, heading in ev.links:
        md = IE.link_markdown(nb, heading)
        assert md in card and md in row["在哪一章"]


def test_a_wrong_padding_number_is_caught(monkeypatch):
    """The check can fail: a different η from `cases.padding_eta` changes Q2's sentence and is detected."""
    from batchlab.course import cases as C
    expected = _e2()
    real = IE.run("Q2")
    monkeypatch.setattr(C, "padding_eta", lambda *a, **k: 0.5)
    wrong = IE.run("Q2")
    assert wrong != real and "η = 0.50；" in wrong
    assert _missing(expected, wrong) == [expected[0]]


def test_a_wrong_kv_count_is_caught(monkeypatch):
    """The check can fail: a cache holding one byte more than the formula breaks Q4's expectation."""
    from batchlab.course import capacity
    expected = _e4()
    real_fn = capacity.toy_kv_accounting

    def off_by_one(*a, **k):
        return [{**r, "used_bytes": r["used_bytes"] + 1} for r in real_fn(*a, **k)]

    monkeypatch.setattr(capacity, "toy_kv_accounting", off_by_one)
    wrong = IE.run("Q4")
    assert _missing(expected, wrong) == [expected[-1]], wrong
    with pytest.raises(AssertionError):
        _e4()


def test_run_rejects_unknown_ids():
    with pytest.raises(ValueError, match="unknown question"):
        IE.run("Q11")


def test_answer_card_has_explanation_erratum_and_links():
    bank = load_bank("interview")
    card = IE.answer_card("Q5", run_experiment=False)
    assert bank["Q5"].explanation in card
    assert "> **勘误**" in card and "06_engineering.ipynb#" in card
    assert "> **勘误**" not in IE.answer_card("Q1", run_experiment=False)
    rows = IE.evidence_rows(run_experiments=False)
    assert [r["题号"] for r in rows] == bank.ids and all("](" in r["在哪一章"] for r in rows)
