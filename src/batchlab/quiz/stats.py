"""Item statistics for instructors (`python -m batchlab.quiz stats`): per question its difficulty,
discrimination, top/bottom 27 % share right, option counts and the flags of `FLAG_TEXT`.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from batchlab.quiz.bank import Bank

FLAG_TEXT = {
    "everyone-right": "人人答对：区分不出掌握程度",
    "nobody-right": "无人答对：检查答案或讲解",
    "strongest-miss": "高分学员反而答错：答案或题干可能有歧义",
    "weak": "区分度低（r < 0.2）",
    "unused-distractor": "有干扰项无人选择",
    "few-learners": "人数太少（< 5），数字仅供参考",
}


def _corr(x: np.ndarray, y: np.ndarray) -> float | None:
    return float(np.corrcoef(x, y)[0, 1]) if len(x) >= 2 and np.std(x) > 0 and np.std(y) > 0 else None


def item_stats(reports: Sequence[dict[str, Any]], bank: Bank) -> list[dict[str, Any]]:
    """One dict per question of `bank`, from graded reports of that bank (`grade_submission`
    output): `id, kind, n, p, r, upper_p, lower_p, options, flags` (p/r/upper_p/lower_p None when
    undefined)."""
    for r in reports:
        if r["bank"] != bank.name:
            raise ValueError(f"{r['file']}: graded against bank {r['bank']!r}, not {bank.name!r}")
    out = []
    for q in bank:
        rows = [r for r in reports if q.id in r["results"]]
        item = np.array([float(r["results"][q.id]["correct"]) for r in rows])
        rest_a = np.array([np.mean([v["correct"] for k, v in r["results"].items() if k != q.id] or [math.nan])
                           for r in rows], dtype=float)
        ok = ~np.isnan(rest_a)
        n = len(rows)
        p = float(item.mean()) if n else None
        r_val = _corr(item[ok], rest_a[ok]) if ok.sum() >= 2 else None
        upper_p = lower_p = None
        if ok.sum() >= 4:
            order = np.argsort(rest_a[ok], kind="stable")
            k = max(1, int(round(0.27 * ok.sum())))
            lower_p = float(item[ok][order[:k]].mean())
            upper_p = float(item[ok][order[-k:]].mean())
        options: dict[str, int] = {}
        if q.kind != "numeric":
            options = {oid: 0 for oid in q.option_ids}
            for r in rows:
                given = r["results"][q.id]["given"]
                for g in ([given] if isinstance(given, str) else (given or [])):
                    oid = q.id_of_letter(g) if len(g) == 1 else g
                    options[oid] = options.get(oid, 0) + 1
        miss = (r_val is not None and r_val < 0) or (upper_p is not None and upper_p < lower_p)
        flags = [f for f, on in (
            ("everyone-right", n and p == 1.0), ("nobody-right", n and p == 0.0), ("strongest-miss", miss),
            ("weak", not miss and r_val is not None and r_val < 0.2 and n >= 10),
            ("unused-distractor", n >= 10 and 0 in [c for oid, c in options.items() if oid not in q.key_ids]),
            ("few-learners", n < 5)) if on]
        out.append({"id": q.id, "kind": q.kind, "n": n, "p": p, "r": r_val, "upper_p": upper_p,
                    "lower_p": lower_p, "options": options, "flags": flags})
    return out


def _f(x: float | None, fmt: str = "{:.2f}") -> str:
    return "—" if x is None else fmt.format(x)


def stats_table(rows: Sequence[dict[str, Any]], bank: Bank, learners: int) -> str:
    """The statistics as a plain-text table with a legend of the flags that occur."""
    lines = [f"题库 {bank.name}：{learners} 份答卷",
             f"{'question':<10}{'n':>5}{'p':>8}{'r':>9}{'top27':>7}{'bot27':>7}  flags"]
    for s in rows:
        lines.append(f"{s['id']:<10}{s['n']:>5}{_f(s['p']):>8}{_f(s['r'], '{:+.2f}'):>9}"
                     f"{_f(s['upper_p']):>7}{_f(s['lower_p']):>7}  {', '.join(s['flags'])}")
    used = sorted({f for s in rows for f in s["flags"]}, key=list(FLAG_TEXT).index)
    lines += [""] * bool(used) + [f"  {f}: {FLAG_TEXT[f]}" for f in used]
    lines.append("\np = 难度（答对的比例）；r = 区分度（本题对错与其余题得分率的相关系数，点二列相关）；"
                 "top27/bot27 = 其余题得分最高/最低 27% 学员的答对率。")
    return "\n".join(lines) + "\n"
