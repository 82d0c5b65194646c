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


def test_link_markdown_anchor():
    assert IE.link_markdown("09_misconceptions.ipynb", "误区三：a b") == "[09 · 误区三：a b](09_misconceptions.ipynb#误区三：a-b)"
    assert IE.link_markdown("04_tuning.ipynb") == "[04](04_tuning.ipynb)"


# ----------------------------------------------------------------------------- the numbers
# Every experiment is seeded: its sentence is stored here, from one run read and checked by hand.
# The closed-form ones are also rebuilt from first principles in the next test.
REFERENCE = {
    'Q1': '同一个实例（t(B) = 4 + 1.3B ms）：一单一锅 189 请求/s，合批到 32 个 702 请求/s（×3.7）',
    'Q2': '12 个租户的请求每 8 个补齐成一批：η = 0.27；连续批处理不补齐：η = 1.00',
    'Q3': '半负载下 delay 0 → 20 ms：p99 25.8 → 42.1 ms，吞吐 354 → 354 请求/s（不降）',
    'Q4': '4 条序列各 23 个 token × 8,192 B/token：公式 753,664 B，缓存里实有 753,664 B',
    'Q5': '两档优先级、总负载 110%：低优先级 p99 排队 3.9 s；加 max_queue_delay 无济于事（FIFO 0.9 s → 0.9 s）；低优先级 200 ms 超时后最长等 200 ms（35% 被拒）',
    'Q6': '满批执行时间 B=32 → 128：46 → 170 ms；64 条 4k 序列的 KV（Llama-3-8B）32 GiB；容量 702 → 751 请求/s（没有下降）',
    'Q7': '原文「序列模式」：53% 的 tick 锅里有空位而门口有人等；平均延迟 只提前返回 5.5 s，空位即补（连续批处理）2.9 s',
    'Q8': '到达 450 请求/s：max_batch_size 4 的容量 435/s，队列失控（p99 0.6 s）；8 的容量 556/s，p99 35 ms',
    'Q9': '同一配置写两个调度器 → error（oneof scheduling_choice）；迭代级调度（连续批处理）容量 1149 token/s，请求级合批（动态批处理器）427 token/s',
    'Q10': '短单与长单同锅：请求级补齐批短单 p99 5.7 s，连续批处理 0.42 s',
}


def test_closed_form_numbers_follow_from_the_inputs():
    """Q1, Q4, Q6 and Q8's capacities by hand: t(B) = 4 + 1.3·B ms; KV = 2·layers·kv_heads·dim·bytes."""
    t = lambda b: 4 + 1.3 * b  # noqa: E731  (ms)
    assert f"一单一锅 {1e3 / t(1):.0f} 请求/s，合批到 32 个 {32e3 / t(32):.0f} 请求/s（×3.7）" in REFERENCE["Q1"]
    toy = 2 * 4 * 4 * 64 * 4  # toy LM: 4 layers, 4 KV heads of 64, float32
    assert f"各 {16 + 8 - 1} 个 token × {toy:,} B/token：公式 {4 * 23 * toy:,} B，缓存里实有 {4 * 23 * toy:,} B" \
        in REFERENCE["Q4"]
    llama3 = 2 * 32 * 8 * 128 * 2  # 32 layers, 8 KV heads of 128, fp16
    assert f"B=32 → 128：{t(32):.0f} → {t(128):.0f} ms；64 条 4k 序列的 KV（Llama-3-8B）" \
        f"{64 * 4096 * llama3 / 2**30:.0f} GiB；容量 {32e3 / t(32):.0f} → {128e3 / t(128):.0f}" in REFERENCE["Q6"]
    assert f"max_batch_size 4 的容量 {4e3 / t(4):.0f}/s" in REFERENCE["Q8"]
    assert f"8 的容量 {8e3 / t(8):.0f}/s" in REFERENCE["Q8"]


@pytest.mark.parametrize("qid", list(IE.EVIDENCE))
def test_each_experiment_returns_its_number(qid):
    """The sentence is the stored one, and the answer card carries it."""
    text = IE.run(qid)
    assert text == REFERENCE[qid]
    assert f"本次实验：{text}" in IE.answer_card(qid)


@pytest.mark.parametrize("qid", list(IE.EVIDENCE))
def test_each_question_links_an_existing_section(qid):
    ev = IE.EVIDENCE[qid]
    assert any(heading for _, heading in ev.links), "no link names a section"
    card = IE.answer_card(qid, run_experiment=False)
    row = next(r for r in IE.evidence_rows(run_experiments=False) if r["题号"] == qid)
    for nb, heading in ev.links:
        assert (NOTEBOOKS / nb).is_file(), nb
        if heading:
            assert heading in _headings(NOTEBOOKS / nb), (nb, heading)
        md = IE.link_markdown(nb, heading)
        assert md in card and md in row["在哪一章"]


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
