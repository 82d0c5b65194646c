"""The course map's learning path: minutes per chapter and lab, which lab follows which chapter,
and three routes through the course (self-study, interview preparation in one weekend, a
classroom term).

One rule gives every time: a chapter's 用时 is the minutes its first cell states (**用时**（约 N
分钟）); a chapter that states none is timed as reading plus running once — its Chinese prose
characters (Han characters in the markdown cells) at 300 a minute, plus the seconds a full run
takes on the reference machine (2 cores) — rounded to 5 minutes. A lab's time is the one its
goals state (**本实验目标**（约 N 分钟）).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from batchlab.paths import read_notebook, repo_root

#: Reading speed for Chinese prose, characters per minute.
CHARS_PER_MINUTE = 300
#: Seconds one full run of each chapter takes on the reference machine (2 cores).
CHAPTER_RUN_S = {0: 5, 1: 22, 2: 31, 3: 80, 4: 22, 5: 30, 6: 38, 7: 21, 8: 12, 9: 26, 10: 6, 11: 85}
#: Seconds the reference solution of each lab takes to run.
LAB_RUN_S = {1: 7, 2: 33, 3: 13, 4: 60, 5: 26, 6: 11}
#: Minutes of the quiz blocks a route may hold: the interview bank (10 questions, 2 minutes each).
QUIZ_MINUTES = {"quiz": 20}

_STATED = re.compile(r"\*\*用时\*\*\s*[：:（(]?\s*约?\s*(\d+)\s*分钟")
_LAB_STATED = re.compile(r"\*\*本实验目标\*\*\s*（约\s*(\d+)\s*分钟")
_PREREQ = re.compile(r"\*\*前置\*\*\s*[：:]?\s*(.+?)\s*(?:\*\*|$)", re.M)
_HAN = re.compile(r"[\u4e00-\u9fff]")


@dataclass(frozen=True)
class Item:
    """One stop on the path: a chapter, a lab, an appendix or the quiz."""

    key: str          # "ch02", "lab2", "appA", "quiz"
    title: str
    file: str         # relative to the repository root
    prereq: str = ""  # what to read first (a chapter that states its own 前置 wins)


CHAPTERS = {
    "ch00": Item("ch00", "第 0 章 可视化演示", "notebooks/00_visual_demo.ipynb", "无"),
    "ch01": Item("ch01", "第 1 章 推理瓶颈", "notebooks/01_bottleneck.ipynb", "无"),
    "ch02": Item("ch02", "第 2 章 动态批处理", "notebooks/02_dynamic_batching.ipynb", "第 1 章"),
    "ch03": Item("ch03", "第 3 章 序列批处理器与连续批处理", "notebooks/03_sequence_batching.ipynb", "第 2 章"),
    "ch04": Item("ch04", "第 4 章 参数调优", "notebooks/04_tuning.ipynb", "第 2 章"),
    "ch05": Item("ch05", "第 5 章 性能评估", "notebooks/05_evaluation.ipynb", "第 2、4 章"),
    "ch06": Item("ch06", "第 6 章 工程实战", "notebooks/06_engineering.ipynb", "第 4、5 章"),
    "ch07": Item("ch07", "第 7 章 AI 应用场景", "notebooks/07_applications.ipynb", "第 2–6 章"),
    "ch08": Item("ch08", "第 8 章 Python 演示", "notebooks/08_python_demo.ipynb", "第 2、3 章"),
    "ch09": Item("ch09", "第 9 章 常见误区", "notebooks/09_misconceptions.ipynb", "第 2–4 章"),
    "ch10": Item("ch10", "第 10 章 面试题", "notebooks/10_interview.ipynb", "第 2–4、9 章"),
    "ch11": Item("ch11", "第 11 章 今天的大模型服务", "notebooks/11_llm_serving.ipynb", "第 3 章"),
}
LABS = {
    "lab1": Item("lab1", "Lab 1 第一口锅", "labs/lab1_first_pot.ipynb", "第 1 章"),
    "lab2": Item("lab2", "Lab 2 动态批处理", "labs/lab2_dynamic_batching.ipynb", "第 2 章"),
    "lab3": Item("lab3", "Lab 3 序列批处理器", "labs/lab3_sequence_batching.ipynb", "第 3 章"),
    "lab4": Item("lab4", "Lab 4 连续批处理", "labs/lab4_continuous_batching.ipynb", "第 3、11 章"),
    "lab5": Item("lab5", "Lab 5 晚高峰", "labs/lab5_rush_hour.ipynb", "第 6 章"),
    "lab6": Item("lab6", "Lab 6 GPU", "labs/lab6_gpu.ipynb", "第 1、11 章"),
}
EXTRAS = {
    "appA": Item("appA", "勘误总表", "notebooks/appendix_errata.ipynb", "随用随查"),
    "appB": Item("appB", "附录 B 选读：批服务排队的推导", "notebooks/appendix_queueing.ipynb", "第 4 章"),
    "quiz": Item("quiz", "测验：十道面试题", "quiz/quiz.ipynb", "第 10 章"),
}
ITEMS = {**CHAPTERS, **LABS, **EXTRAS}

#: Which lab follows which chapter (the self-study order below puts it right after).
LAB_AFTER = {"lab1": "ch01", "lab2": "ch02", "lab3": "ch03", "lab4": "ch11", "lab5": "ch06", "lab6": "lab4"}

#: The three routes, in the order to take them. A classroom lesson is one list.
SELF_STUDY = ["ch00", "ch01", "lab1", "ch02", "lab2", "ch03", "lab3", "ch04", "ch05", "ch06", "lab5",
              "ch07", "ch08", "ch09", "ch10", "ch11", "lab4", "lab6"]
WEEKEND = {"周六": ["ch00", "ch01", "ch02", "ch04", "lab2"], "周日": ["ch03", "ch11", "lab4", "ch09", "ch10", "quiz"]}
#: A classroom term: (title, chapters discussed in class, the lab begun in class and finished at home).
LESSONS = [
    ("一单一炒与第一口锅", ["ch00", "ch01"], "lab1"),
    ("动态批处理：规则、配置与调优", ["ch02", "ch04"], "lab2"),
    ("序列批处理器与连续批处理", ["ch03"], "lab3"),
    ("性能评估与工程实战", ["ch05", "ch06"], "lab5"),
    ("案例复算、文章的模拟器与常见误区", ["ch07", "ch08", "ch09"], None),
    ("今天的大模型服务", ["ch11"], "lab4"),
    ("GPU 与面试", ["ch10"], "lab6"),
    ("复习：勘误总表与测验", ["appA", "quiz"], None),
]


def _notebook(item: Item, root: Path | None = None) -> dict | None:
    path = (root or repo_root()) / item.file
    return read_notebook(path) if path.is_file() else None


def _first_cell(nb: dict) -> str:
    return "".join(nb["cells"][0]["source"]) if nb and nb.get("cells") else ""


def reading_minutes(nb: dict) -> float:
    """Minutes to read the Chinese prose of a notebook's markdown cells at CHARS_PER_MINUTE."""
    text = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    return len(_HAN.findall(text)) / CHARS_PER_MINUTE


def round5(minutes: float) -> int:
    """Rounded to 5 minutes, at least 5."""
    return max(5, 5 * math.floor(minutes / 5 + 0.5))


def minutes(key: str, root: Path | None = None) -> int | None:
    """Minutes for one stop of the path (None for a notebook that is not there)."""
    if key in QUIZ_MINUTES:
        return QUIZ_MINUTES[key]
    nb = _notebook(ITEMS[key], root)
    if nb is None:
        return None
    pattern = _LAB_STATED if key in LABS else _STATED
    stated = pattern.search(_first_cell(nb))
    if stated:
        return int(stated.group(1))
    run_s = CHAPTER_RUN_S.get(int(key[2:]), 0) if key in CHAPTERS else 0
    return round5(reading_minutes(nb) + run_s / 60)


def prerequisites(key: str, root: Path | None = None) -> str:
    """A chapter's own **前置** line where it states one, else the course map's."""
    if key in CHAPTERS:
        found = _PREREQ.search(_first_cell(_notebook(ITEMS[key], root) or {}))
        if found:
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", found.group(1)).strip().rstrip("。；;")
            return text[1:-1] if text.startswith("（") and text.endswith("）") else text
    return ITEMS[key].prereq


def total(keys: list[str], root: Path | None = None) -> int:
    """Minutes of a list of stops (a missing notebook counts 0)."""
    return sum(minutes(k, root) or 0 for k in keys)


def hours(mins: int) -> str:
    """「3 小时 20 分钟」."""
    h, m = divmod(mins, 60)
    return (f"{h} 小时" if h else "") + (f" {m} 分钟" if m else "") if mins else "0 分钟"


def path_markdown(root: Path | None = None) -> str:
    """The learning path as a markdown table, in the self-study order."""
    rows = ["| 顺序 | 内容 | 前置 | 用时（分钟） | 参考答案运行 |", "| ---: | --- | --- | ---: | ---: |"]
    for i, key in enumerate(SELF_STUDY, 1):
        item, mins = ITEMS[key], minutes(key, root)
        run = f"{LAB_RUN_S[int(key[3:])]} s" if key in LABS else ""
        rows.append(f"| {i} | {item.title} | {prerequisites(key, root)} | {mins if mins else '—'} | {run} |")
    return "\n".join(rows)


def short(key: str) -> str:
    """「第 2 章」, 「Lab 2」, or the title of an appendix or the quiz."""
    if key in CHAPTERS:
        return f"第 {int(key[2:])} 章"
    return f"Lab {key[3:]}" if key in LABS else ITEMS[key].title


def routes_text(root: Path | None = None) -> str:
    """The three routes with their minutes, in Chinese."""
    names = lambda keys: "、".join(short(k) for k in keys)
    lines = [f"自学（全部章节和实验，按上表的顺序）：{hours(total(SELF_STUDY, root))}"]
    for day, keys in WEEKEND.items():
        lines.append(f"面试周末 · {day}：{hours(total(keys, root))}（{names(keys)}）")
    lines.append(f"课堂一学期：{len(LESSONS)} 次课（章节课内讲，实验课内开始、课后完成）")
    for i, (title, keys, lab) in enumerate(LESSONS, 1):
        extra = f"；{short(lab)} {minutes(lab, root)} 分钟" if lab else ""
        lines.append(f"  第 {i} 课 {title}：{names(keys)} {total(keys, root)} 分钟{extra}")
    return "\n".join(lines)
