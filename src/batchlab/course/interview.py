"""The article's ten interview questions (chapter 10): `EVIDENCE[qid]` names the chapter sections
and the experiment behind each answer; `run(qid)` re-runs a small seeded version of it and
returns its deciding number as one Chinese sentence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from batchlab.config_pbtxt import check_config
from batchlab.course import capacity, cases
from batchlab.course.engineering import starvation_experiment
from batchlab.course.misconceptions import batch_size_sweep, combination_comparison, delay_sweep
from batchlab.course.presets import EMBED_LIKE, LLM_COST
from batchlab.course.seed_demo import trace_sim
from batchlab.course.seed_redo import ARTICLE_COST, article_workload, redo
from batchlab.lm import ToyLM
from batchlab.quiz import load_bank
from batchlab.theory.kv import kv_bytes_for


@dataclass(frozen=True)
class Evidence:
    """Where a question's answer is shown: (notebook, section heading) pairs and the experiment."""

    qid: str
    links: tuple[tuple[str, str], ...]
    experiment: str
    claim: str


def link_markdown(notebook: str, heading: str = "") -> str:
    """A markdown link to `notebook` (relative to notebooks/), at `heading` if given (JupyterLab's
    anchor: spaces become hyphens)."""
    label = notebook.split("_")[0] + (f" · {heading}" if heading else "")
    target = notebook + (f"#{heading.strip().replace(' ', '-')}" if heading else "")
    return f"[{label}]({target})"


EVIDENCE: dict[str, Evidence] = {
    "Q1": Evidence("Q1", (("02_dynamic_batching.ipynb", ""), ("06_engineering.ipynb", "成本：一锅菜到底多少钱")),
                   "`EMBED_LIKE.throughput(1)` 对比 `throughput(32)`；第 6 章在服务器上实测 `embed_nobatch` 对比 `embed`",
                   "把独立请求拼成一批，同一个实例每秒服务的请求数成倍增加"),
    "Q2": Evidence("Q2", (("03_sequence_batching.ipynb", ""), ("07_applications.ipynb", "案例二：12 个业务线的 SaaS 平台")),
                   "`cases.padding_eta`：12 个租户的混合请求补齐成批，对比连续批处理（η = 1）",
                   "补齐批要把短序列补到最长者；不补齐（连续批处理）时 η = 1"),
    "Q3": Evidence("Q3", (("04_tuning.ipynb", ""), ("09_misconceptions.ipynb", "误区三：把 max_queue_delay 调得很小，吞吐会暴跌")),
                   "`misconceptions.delay_sweep`：半负载下扫排队延时",
                   "延时加大：延迟上升，吞吐不降"),
    "Q4": Evidence("Q4", (("09_misconceptions.ipynb", "误区四：KV Cache 只是加速技巧，不占显存"),
                          ("06_engineering.ipynb", "OOM：KV Cache 的容量规划")),
                   "`capacity.toy_kv_accounting`：在课程的 numpy 模型上逐字节清点 KV",
                   "KV Cache 存每个已处理 token 每层的 K、V：字节数与公式逐字节相等"),
    "Q5": Evidence("Q5", (("06_engineering.ipynb", "饥饿：先看见，再治好"),),
                   "`engineering.starvation_experiment`：两档优先级、过载、队列策略的超时",
                   "饥饿来自插队（高优先级越过低优先级，或 timeout_action: DELAY 让同档后来的请求越过超时的请求）或过载；给等待设上限的是队列策略的超时（REJECT），不是 max_queue_delay"),
    "Q6": Evidence("Q6", (("05_evaluation.ipynb", ""), ("09_misconceptions.ipynb", "误区一：把 max_batch_size 调到最大，性能一定最好")),
                   "`misconceptions.batch_size_sweep` 与 `llm_batch_sweep`：扫批上限",
                   "代价是等待、显存和更长的单次执行；吞吐并不因批处理而下降"),
    "Q7": Evidence("Q7", (("08_python_demo.ipynb", "原文的演示与修正版，并排"),
                          ("09_misconceptions.ipynb", "误区二：动态批处理和序列批处理只能二选一")),
                   "`seed_demo.trace_sim`（空着的批槽位）对比 `simulate_continuous`",
                   "空位被补上才是连续批处理；只提前返回不补位，吞吐不变"),
    "Q8": Evidence("Q8", (("09_misconceptions.ipynb", "误区一：把 max_batch_size 调到最大，性能一定最好"),
                          ("06_engineering.ipynb", "在线与离线：两套设置")),
                   "`misconceptions.batch_size_sweep`：到达 450 请求/s 时扫批上限",
                   "批上限太小，容量低于到达率，队列失控"),
    "Q9": Evidence("Q9", (("09_misconceptions.ipynb", "误区二：动态批处理和序列批处理只能二选一"),),
                   "`config_pbtxt.check_config`（oneof）加 `misconceptions.combination_comparison`",
                   "同一个模型里二选一（oneof）；B 说的 token 级调度是连续批处理（iterative_sequence 或 LLM 后端），不是序列批处理器，也不是两个调度器的叠加"),
    "Q10": Evidence("Q10", (("07_applications.ipynb", "多租户公平性：短单和长单同锅"),
                            ("05_evaluation.ipynb", "")),
                    "`cases.fairness_experiment`：短单与长单共用一张卡",
                    "请求级批里短单陪长单跑到底，p99 被拉长；连续批处理下尾延迟来自排队和 prefill 干扰"),
}


def _q1() -> str:
    return (f"同一个实例（t(B) = 4 + 1.3B ms）：一单一锅 {EMBED_LIKE.throughput(1):.0f} 请求/s，"
            f"合批到 32 个 {EMBED_LIKE.throughput(32):.0f} 请求/s（×{EMBED_LIKE.throughput(32) / EMBED_LIKE.throughput(1):.1f}）")


def _q2() -> str:
    _, p, o, _ = cases.tenant_requests(cases.TENANTS, 2.0, 4000, seed=0)
    return f"12 个租户的请求每 8 个补齐成一批：η = {cases.padding_eta(p, o, 8):.2f}；连续批处理不补齐：η = 1.00"


def _q3() -> str:
    rows = {r["delay_us"]: r for r in delay_sweep([0, 20000], [0.5], n=8000)}
    a, b = rows[0.0], rows[20000.0]
    return (f"半负载下 delay 0 → 20 ms：p99 {a['p99_ms']:.1f} → {b['p99_ms']:.1f} ms，"
            f"吞吐 {a['throughput_rps']:.0f} → {b['throughput_rps']:.0f} 请求/s"
            f"（{'不降' if b['throughput_rps'] >= 0.99 * a['throughput_rps'] else '下降'}）")


def _q4() -> str:
    r = capacity.toy_kv_accounting(ToyLM.default(), [4], 16, 8)[0]
    return (f"4 条序列各 {r['tokens_per_seq']} 个 token × {r['bytes_per_token']:,} B/token："
            f"公式 {r['formula_bytes']:,} B，缓存里实有 {r['used_bytes']:,} B")


def _q5() -> str:
    rows = {(x["policy"], x["class"][:3]): x for run in starvation_experiment(n=8000) for x in run.rows}
    lo = "低优先"
    return (f"两档优先级、总负载 110%：低优先级 p99 排队 {rows[('priority', lo)]['queue_p99_ms'] / 1e3:.1f} s；"
            f"加 max_queue_delay 无济于事（FIFO {rows[('fifo', lo)]['queue_p99_ms'] / 1e3:.1f} s → "
            f"{rows[('fifo_delay', lo)]['queue_p99_ms'] / 1e3:.1f} s）；低优先级 200 ms 超时后最长等 "
            f"{rows[('priority_timeout', lo)]['queue_max_ms']:.0f} ms（{rows[('priority_timeout', lo)]['dropped_pct']:.0f}% 被拒）")


def _q6() -> str:
    gib = 64 * 4096 * kv_bytes_for("Llama-3-8B") / 2**30
    return (f"满批执行时间 B=32 → 128：{EMBED_LIKE.time(32) * 1e3:.0f} → {EMBED_LIKE.time(128) * 1e3:.0f} ms；"
            f"64 条 4k 序列的 KV（Llama-3-8B）{gib:.0f} GiB；容量 {EMBED_LIKE.throughput(32):.0f} → {EMBED_LIKE.throughput(128):.0f} 请求/s"
            f"（{'没有下降' if EMBED_LIKE.throughput(128) >= EMBED_LIKE.throughput(32) else '下降'}）")


def _q7() -> str:
    tr = trace_sim(4, 3.0, True, duration=400.0)
    a, L = article_workload(6000, seed=1)
    rows = {r["scheduler"]: r for r in redo(a, L, 4, 3.0, ARTICLE_COST, ("seq", "continuous"), warmup=0.1)}
    return (f"原文「序列模式」：{100 * tr.empty_slot_ticks / tr.ticks:.0f}% 的 tick 锅里有空位而门口有人等；"
            f"平均延迟 只提前返回 {rows['seq']['mean_s']:.1f} s，空位即补（连续批处理）{rows['continuous']['mean_s']:.1f} s")


def _q8() -> str:
    rows = {r["max_batch_size"]: r for r in batch_size_sweep([4, 8], rate=450, n=6000)}
    return (f"到达 450 请求/s：max_batch_size 4 的容量 {rows[4]['capacity_rps']:.0f}/s，"
            f"{'队列失控' if not rows[4]['stable'] else '稳定'}（p99 {rows[4]['p99_ms'] / 1e3:.1f} s）；"
            f"8 的容量 {rows[8]['capacity_rps']:.0f}/s，p99 {rows[8]['p99_ms']:.0f} ms")


def _q9() -> str:
    err = check_config('max_batch_size: 8\ndynamic_batching { }\nsequence_batching { }')[0]
    rows = {r["scheduler"]: r for r in combination_comparison(2.0, LLM_COST, n=800, overload_rate=30.0)}
    return (f"同一配置写两个调度器 → {err.level}（oneof scheduling_choice）；"
            f"迭代级调度（连续批处理）容量 {rows['combined']['capacity_tokens_per_s']:.0f} token/s，"
            f"请求级合批（动态批处理器）{rows['dynamic_only']['capacity_tokens_per_s']:.0f} token/s")


def _q10() -> str:
    f = {(r["scheduler"], r["tenant"]): r for r in cases.fairness_experiment(n=2000)}
    return (f"短单与长单同锅：请求级补齐批短单 p99 {f[('static', '短单')]['p99_s']:.1f} s，"
            f"连续批处理 {f[('continuous', '短单')]['p99_s']:.2f} s")


_RUNNERS: dict[str, Callable[[], str]] = {
    "Q1": _q1, "Q2": _q2, "Q3": _q3, "Q4": _q4, "Q5": _q5,
    "Q6": _q6, "Q7": _q7, "Q8": _q8, "Q9": _q9, "Q10": _q10,
}


def run(qid: str) -> str:
    """Re-run the experiment behind question `qid` (Q1 … Q10) and return its deciding number."""
    if qid not in _RUNNERS:
        raise ValueError(f"unknown question {qid!r}; choose from {', '.join(_RUNNERS)}")
    return _RUNNERS[qid]()


def evidence_rows(run_experiments: bool = True) -> list[dict[str, str]]:
    """One row per question: id, claim, links, experiment and (`run_experiments`) its number."""
    rows = []
    for qid, ev in EVIDENCE.items():
        row = {"题号": qid, "结论": ev.claim,
               "在哪一章": "，".join(link_markdown(nb, h) for nb, h in ev.links),
               "实验": ev.experiment}
        if run_experiments:
            row["本次实验的数字"] = run(qid)
        rows.append(row)
    return rows


def answer_card(qid: str, run_experiment: bool = True, bank: str = "interview") -> str:
    """Markdown for an answered question: question, key, explanation (勘误 where the article is
    wrong), links to the chapters and, with `run_experiment`, the experiment's number."""
    if qid not in EVIDENCE:
        raise ValueError(f"unknown question {qid!r}; choose from {', '.join(EVIDENCE)}")
    q = load_bank(bank)[qid]
    ev = EVIDENCE[qid]
    expected = q.expected()
    key = expected if isinstance(expected, str) else "".join(expected)
    lines = [f"**{qid}. {q.raw['question']}**（答案 {key}）", "", q.explanation]
    if q.erratum:
        lines += ["", f"> **勘误**：{q.erratum}"]
    lines += ["", "证据：" + "；".join(link_markdown(nb, h) for nb, h in ev.links) + f"。实验：{ev.experiment}。"]
    if run_experiment:
        lines += ["", f"本次实验：{run(qid)}"]
    return "\n".join(lines)
