"""Item writing: keys spread, no blind strategy beats chance, options alike, explanations that
survive shuffling, every quoted number recomputed — and the audit catches each planted flaw."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest

from batchlab.quiz import grade_submission, load_all, load_bank
from batchlab.quiz.audit import (
    MAX_KEY_SHARE,
    audit,
    blind_scores,
    chance,
    eval_expr,
    key_positions,
    letter_references,
    number_problems,
    quoted_numbers,
)
from batchlab.quiz.bank import Bank, parse_bank
from batchlab.quiz.params import seed_for

BANKS = load_all()
CHAPTERS = {n: b for n, b in BANKS.items() if n != "interview"}
CHOICE = [q for b in CHAPTERS.values() for q in b if q.kind != "numeric"]


def test_the_stored_banks_pass_the_whole_audit() -> None:
    assert audit(BANKS) == []


def test_no_key_position_holds_more_than_35_percent() -> None:
    shares = key_positions(BANKS)
    assert set(shares) == set("ABCD") and max(shares.values()) <= MAX_KEY_SHARE, shares
    singles = [q for q in CHOICE if q.kind == "single"]
    assert len(singles) >= 30


def test_multi_select_keys_vary() -> None:
    multis = [q for q in CHOICE if q.kind == "multi"]
    assert len(multis) >= 6
    assert sum(q.option_ids[0] not in q.key_ids for q in multis) >= 2   # some without the first
    assert len({len(q.key_ids) for q in multis}) >= 3                     # 1, 2, 3 keys …
    assert not any(set(q.key_ids) == set(q.option_ids) for q in multis)  # never "all of them"


@pytest.mark.parametrize("strategy", ["always-first", "always-longest", "all-of-the-above"])
def test_blind_strategies_do_not_beat_chance_in_article_order(strategy: str) -> None:
    scores = blind_scores(BANKS)
    row = scores["all"]
    assert row[strategy] <= row[f"{strategy}:chance"] + 0.10, row
    for name, r in scores.items():       # per bank: at most one question's worth above chance
        if strategy in r:
            assert r[strategy] <= r[f"{strategy}:chance"] + max(0.10, 1 / r[f"{strategy}:n"]) + 1e-9, name


@pytest.mark.slow
def test_blind_strategies_under_per_learner_shuffling() -> None:
    firsts, longests = [], []
    for i in range(200):
        row = blind_scores(BANKS, seed=seed_for(f"learner{i}"))["all"]
        firsts.append(row["always-first"])
        longests.append(row["always-longest"])
    base = blind_scores(BANKS)["all"]["chance"]
    assert abs(np.mean(firsts) - base) < 0.03        # the shuffle spreads the key evenly
    assert np.mean(longests) <= base + 0.10


@pytest.mark.slow
def test_uniform_random_guess_graded_by_the_grader_scores_chance() -> None:
    rng = np.random.default_rng(16)
    trials = 100
    got = want = 0.0
    for name, bank in CHAPTERS.items():
        qs = [q for q in bank if q.kind != "numeric"]
        for _ in range(trials):
            sub = {"_bank": name}
            for q in qs:
                ids = q.option_ids
                if q.kind == "single":
                    sub[q.id] = ids[int(rng.integers(len(ids)))]
                else:
                    subsets = [s for k in range(1, len(ids) + 1) for s in itertools.combinations(ids, k)]
                    sub[q.id] = list(subsets[int(rng.integers(len(subsets)))])
            got += grade_submission(sub, bank)["score"]  # the bank loaded once, not re-read per submission
        want += trials * sum(chance(q) for q in qs)
    n = trials * len(CHOICE)
    assert abs(got - want) / n < 0.03, (got / n, want / n)


def test_options_of_a_question_are_alike_in_length() -> None:
    from batchlab.quiz.audit import MAX_WIDTH_RATIO, display_width as width
    for q in CHOICE:
        w = [width(q.option(o)["answer"]) for o in q.option_ids]
        assert max(w) <= MAX_WIDTH_RATIO * min(w), (q.id, w)


def test_every_distractor_names_a_distinct_misconception() -> None:
    for q in CHOICE:
        wrong = [q.option(o) for o in q.option_ids if o not in q.key_ids]
        ms = [a["misconception"] for a in wrong]
        assert all(m and m in a["feedback"] for m, a in zip(ms, wrong)), q.id
        assert len(set(ms)) == len(ms), q.id


def test_every_quoted_number_is_recomputed_or_sourced() -> None:
    exprs = 0
    for b in BANKS.values():
        for q in b:
            assert number_problems(q) == [], q.id
            for k, v in q.raw.get("numbers", {}).items():
                if "expr" in v:
                    exprs += 1
                    value = eval_expr(v["expr"])
                    decimals = len(k.split(".")[1]) if "." in k else 0
                    assert abs(value - float(k.replace(",", ""))) <= 0.5 * 10 ** -decimals + 1e-9
    assert exprs >= 30


# --- the audit catches planted flaws ----------------------------------------------------------


def _bank_with(name: str, change) -> Bank:
    data = json.loads(BANKS[name].path.read_text("utf-8"))    # the stored form
    change(data)
    return Bank(name, Path(f"{name}.json"), parse_bank(data, name, f"{name}.json"))


def test_audit_catches_an_unsourced_number_and_a_wrong_expression() -> None:
    def plant(data):
        q = next(q for q in data if q["id"] == "ch01-3")
        q["explanation"] += "实测快了 3.7 倍。"
        q["numbers"]["295"] = {"expr": "ridge(tflops=989, tbs=4.8)"}
    bank = _bank_with("ch01", plant)
    problems = number_problems(bank["ch01-3"])
    assert any("quotes 3.7" in p for p in problems)
    assert any("numbers['295']" in p and "not 295" in p for p in problems)


def test_audit_catches_keys_all_at_one_position() -> None:
    def plant(data):
        for q in data:
            if q["kind"] == "single":
                i = next(i for i, a in enumerate(q["answers"]) if a["correct"])
                q["answers"].insert(0, q["answers"].pop(i))
    banks = {**BANKS, "ch09": _bank_with("ch09", plant), "ch01": _bank_with("ch01", plant),
             "ch04": _bank_with("ch04", plant), "ch06": _bank_with("ch06", plant)}
    problems = audit(banks)
    assert any("at position A" in p for p in problems)
    assert any("ch09: always-first" in p for p in problems)


def test_audit_catches_letter_references_and_longest_key() -> None:
    def plant(data):
        q = next(q for q in data if q["id"] == "ch02-5")
        q["explanation"] = "B。" + q["explanation"] + "C 错在以为有多少发多少。"
        key = next(a for a in q["answers"] if a["correct"])
        key["answer"] += "（这是 core GetDynamicBatch 在延迟未到期时的规则）"
    bank = _bank_with("ch02", plant)
    assert len(letter_references(bank["ch02-5"])) == 1
    assert any("ch02-5: options range" in p for p in audit({"ch02": bank}))


def test_quoted_numbers_skip_identifiers_but_not_quantities() -> None:
    text = "Llama-3-8B 的 fp16 KV 是 131,072 B，#4667，第 09 章，2^30，OSDI '22，约 36.9×，0.9"
    assert quoted_numbers(text) == ["131,072", "36.9", "0.9"]


# --- issue 15: the quiz-side corrections ------------------------------------------------------


def _all_text(q) -> str:
    return json.dumps(q.raw, ensure_ascii=False)


def test_issue15_queue_full_rejections_are_not_in_the_rejected_metric() -> None:
    q = BANKS["ch06"]["ch06-5"]
    assert "不会出现在 nv_inference_request_failure" in q.explanation
    assert "PolicyQueue::Enqueue" in q.explanation
    assert "reject-metric" in q.option_ids and "reject-metric" not in q.key_ids


def test_issue43_littles_law_counts_queued_requests_too() -> None:
    """L = λW counts queued requests, which occupy no instance: L / B is no bound on instances
    (ch07-2's premise makes 2 s the execution time, so there the two agree)."""
    for qid in ("ch07-2", "ch07-3"):
        text = BANKS["ch07"][qid].explanation
        assert "10,000" in text and "不占实例" in text, qid
        assert "用哪种调度器都一样" not in text and "与调度方式无关" not in text, qid
    assert "1,250" in BANKS["ch07"]["ch07-2"].explanation
    assert "1,250" not in BANKS["ch07"]["ch07-3"].explanation


def test_issue15_same_slot_only_for_direct() -> None:
    for b in BANKS.values():
        for q in b:
            assert "同一个模型实例（同一个批槽位）" not in _all_text(q), q.id
    for qid, bank in (("ch00-3", "ch00"), ("ch03-4", "ch03")):
        assert re.search("oldest 策略[^。]*不保证同一", BANKS[bank][qid].explanation), qid


def test_issue15_iterative_sequence_is_the_only_one_in_the_core_schedulers() -> None:
    text = BANKS["ch03"]["ch03-5"].explanation
    assert "核心调度器里唯一" in text and "TensorRT-LLM" in text


def test_issue15_delay_zero_with_preferred_sizes() -> None:
    q = BANKS["ch04"]["ch04-7"]
    assert q.expected_ids() == "four" and "pending_batch_delay_ns_ != 0" in q.explanation
    for bank, qid in (("ch00", "ch00-1"), ("ch02", "ch02-7"), ("ch09", "ch09-3")):
        assert "preferred_batch_size" in BANKS[bank][qid].explanation, qid


def test_issue15_no_duplicated_bytes_in_kv_stems() -> None:
    for bank, qid in (("ch03", "ch03-3"), ("ch09", "ch09-4")):
        q = BANKS[bank][qid]
        for combo in itertools.product(*q.raw["params"].values()):
            values = dict(zip(q.raw["params"], combo))
            from batchlab.quiz.params import render_template
            stem = render_template(q.raw["template"], values)
            assert len(re.findall(r"\d{3},\d{3} B", stem)) == 1, stem


def test_issue15_paged_attention_keeps_the_last_block_waste() -> None:
    q = BANKS["ch10"]["ch10-3"]
    assert q.key_ids == ["no-reserve"]
    assert "仍然浪费" in q.explanation and "按最大长度预留" in q.explanation


def test_issue15_q9_erratum_says_where_b_is_false() -> None:
    q9 = load_bank("interview")["Q9"]
    assert q9.expected() == ["A", "B", "D"]
    assert "B「" in q9.erratum and "不成立" in q9.erratum and "不等于连续批处理" in q9.erratum
