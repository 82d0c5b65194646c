"""Question banks: every bank well-formed, the interview bank is the article's, the loader
rejects malformed banks with a message naming file, question and problem."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from batchlab.paths import repo_root
from batchlab.quiz import load_all, load_bank
from batchlab.quiz.bank import LETTERS, sync_file

BANK_NAMES = ["interview"] + [f"ch{c:02d}" for c in range(12)]
ALL = load_all()


def test_all_banks_present_and_ids_unique_across_banks() -> None:
    assert list(ALL) == BANK_NAMES
    ids = [q.id for b in ALL.values() for q in b]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("name", BANK_NAMES)
def test_each_answer_is_stored_once_and_derived_for_jupyterquiz(name: str) -> None:
    stored = json.loads(ALL[name].path.read_text("utf-8"))
    mapping = {"single": "multiple_choice", "multi": "many_choice", "numeric": "numeric"}
    for raw, d in zip(stored, ALL[name].to_jupyterquiz(), strict=True):
        assert "type" not in raw and d["type"] == mapping[d["kind"]]
        assert isinstance(d["question"], str) and d["question"]
        if d["kind"] == "numeric":
            assert "answers" not in raw and ("formula" in raw) == ("answer" not in raw)
            rng = [a for a in d["answers"] if a["type"] == "range"][0]
            assert rng["correct"] is True and rng["range"][0] <= d["answer"] <= rng["range"][1]
            assert rng["feedback"].startswith("正确。")
        else:
            assert "answer" not in raw
            flags = [LETTERS[i] for i, a in enumerate(raw["answers"]) if a["correct"]]
            assert flags == ([d["answer"]] if d["kind"] == "single" else d["answer"])
            for a, full in zip(raw["answers"], d["answers"]):
                assert full["feedback"].endswith(a.get("feedback", "。"))
                assert not (d["kind"] == "single" and a["correct"] and "feedback" in a)


@pytest.mark.parametrize("name", BANK_NAMES)
def test_bank_files_are_in_sync(name: str, tmp_path: Path) -> None:
    """`sync` leaves a committed bank unchanged (its derived fields are current)."""
    src = load_bank(name).path
    copy = tmp_path / src.name
    shutil.copy(src, copy)
    sync_file(copy)
    assert json.loads(copy.read_text("utf-8")) == json.loads(src.read_text("utf-8"))


def test_enough_seeded_numeric_questions() -> None:
    seeded = [q for b in ALL.values() for q in b if q.seeded]
    plain = [q for b in ALL.values() for q in b if q.kind == "numeric" and not q.seeded]
    assert len(seeded) >= 10 and plain
    assert len({q.raw["formula"] for q in seeded}) >= 8


def test_see_paths_name_chapter_notebooks() -> None:
    root = repo_root()
    for b in ALL.values():
        for q in b:
            for path in q.see:
                m = re.fullmatch(r"notebooks/(\d\d)_[a-z0-9_]+\.ipynb", path)
                assert m, f"{q.id}: {path}"
                # once a chapter's notebook exists, the link must name it exactly
                existing = list((root / "notebooks").glob(f"{m.group(1)}_*.ipynb"))
                if existing:
                    assert (root / path).exists(), f"{q.id}: {path} (have {existing[0].name})"


# --- the interview bank is the article's ----------------------------------------------------

ARTICLE = {  # id: (stem, options, key, difficulty) — copied from the article's 面试题 section
    "Q1": ("动态批处理的核心思想是什么？", ["把请求序列拆分成小块并行计算", "将多个独立请求合并成批量处理",
           "增加GPU数量来并行处理多请求", "用CPU替代GPU承担部分计算"], "B", "easy"),
    "Q2": ("序列批处理与传统批处理的主要区别是什么？", ["使用更大的GPU显存容量", "序列长度无需补齐到相同",
           "每次只处理一个用户序列", "只支持固定长度的输入序列"], "B", "easy"),
    "Q3": ("max_queue_delay 设置过大可能导致哪些问题？", ["请求排队等待时间变长", "整体请求延迟随之上升",
           "系统吞吐量必然下降", "批处理收益必然减小"], ["A", "B"], "mid"),
    "Q4": ("KV Cache 在序列批处理中的作用是什么？", ["缓存训练好的模型参数数据", "存储已生成token的键值状态",
           "替代主存承载模型权重", "保存输入数据的副本信息"], "B", "mid"),
    "Q5": ("动态批处理中的「饥饿问题」指的是什么？", ["请求等待过久还未被处理", "GPU显存容量不足导致报错",
           "请求队列溢出导致请求丢失", "模型加载失败无法对外服务"], "A", "easy"),
    "Q6": ("下列哪些是批处理引入的代价？", ["增加单请求的排队延迟时间", "增加GPU显存的使用量",
           "降低系统的总吞吐能力", "加剧调度器的实现复杂度"], ["A", "B", "D"], "mid"),
    "Q7": ("序列批处理中，当某条序列提前完成解码时会发生什么？", ["整个batch必须重新从头计算",
           "该序列让出位置可被新序列填补", "该序列的结果将被直接丢弃", "其他序列全部停止等待其完成"], "B", "hard"),
    "Q8": ("Triton 配置中 max_batch_size 设置过小会导致什么？", ["单请求延迟反而会显著降低",
           "GPU利用率不足、吞吐量受限", "请求队列持续溢出、请求丢失", "模型推理精度出现明显下降"], "B", "mid"),
    "Q9": ("关于动态批处理与序列批处理的组合使用，正确的是？", ["动态批处理负责入口层的请求聚合",
           "序列批处理负责计算层的token调度", "两者必须二选一不能组合使用", "组合使用可兼顾吞吐与显存效率"],
           ["A", "B", "D"], "hard"),
    "Q10": ("批处理场景中尾延迟（tail latency）主要因为什么产生？", ["网络传输时延的随机波动",
            "batch中最长序列拖慢整体完成", "GPU主频随温度动态下降", "请求数据包在网络中丢失"], "B", "extreme"),
}


def test_interview_bank_is_the_articles_word_for_word() -> None:
    bank = ALL["interview"]
    assert bank.ids == [f"Q{i}" for i in range(1, 11)]
    for q in bank:
        stem, options, key, diff = ARTICLE[q.id]
        assert q.raw["question"] == stem
        assert list(q.options.values()) == options
        assert q.difficulty == diff
        assert q.kind == ("multi" if isinstance(key, list) else "single")
        # the article's key is kept unless a key_note explains the change
        art_key = re.match(r"答案：([A-Z]+)。", q.raw["article_explanation"]).group(1)
        assert art_key == "".join(key if isinstance(key, list) else [key])
        if q.key_note is None:
            assert q.raw["answer"] == key


def test_interview_corrections_are_accurate() -> None:
    bank = ALL["interview"]
    q5 = bank["Q5"]
    assert "max_queue_delay" in q5.erratum and "default_timeout_microseconds" in q5.explanation
    assert "设置 max_queue_delay 上限" in q5.raw["article_explanation"]
    for qid in ("Q2", "Q7", "Q9"):  # sequence batching vs continuous batching
        text = bank[qid].explanation
        assert "iterative_sequence" in text and "TensorRT-LLM" in text, qid
    assert "oneof" in bank["Q9"].explanation
    q9 = bank["Q9"].erratum          # issue 15: say where option B is false, and why
    assert q9.startswith("B「序列批处理负责计算层的 token 调度」按 Triton 不成立")
    assert "oneof" in q9 and "不等于连续批处理" in q9
    assert "oldest 策略不保证" in bank["Q2"].explanation   # same slot only with `direct`


def test_every_option_has_a_stable_id_and_interview_ids_are_fixed() -> None:
    for b in ALL.values():
        for q in b:
            if q.kind != "numeric":
                assert len(q.option_ids) == len(set(q.option_ids)) == len(q.options)
    q1 = ALL["interview"]["Q1"]
    assert q1.option_ids == ["split", "merge", "more-gpus", "cpu"] and q1.key_ids == ["merge"]


# --- the loader rejects malformed banks -----------------------------------------------------

GOOD = {
    "id": "ch02-1", "kind": "single", "difficulty": "easy", "chapter": "02", "question": "Q?",
    "answers": [{"id": "wrong-x", "answer": "x", "correct": False, "misconception": "以为 x",
                 "feedback": "因为 y。"},
                {"id": "right-y", "answer": "y", "correct": True}],
    "explanation": "because",
}


def _write(tmp_path: Path, questions: list, name: str = "ch02") -> Path:
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(questions, ensure_ascii=False), "utf-8")
    return p


def test_good_minimal_bank_loads_with_derived_fields(tmp_path: Path) -> None:
    q = load_bank(_write(tmp_path, [GOOD]))["ch02-1"]
    assert q.raw["answer"] == "B" and q.raw["type"] == "multiple_choice"
    assert [a["feedback"] for a in q.raw["answers"]] == ["不对。误解：以为 x。因为 y。", "正确。because"]


@pytest.mark.parametrize("change, problem", [
    ({"answer": "B"}, "'answer' is not stored"),
    ({"answers": [{**GOOD["answers"][0], "correct": True}, GOOD["answers"][1]]}, "2 correct options"),
    ({"kind": "multi", "answers": [{**GOOD["answers"][1], "correct": False, "misconception": "m"},
                                   GOOD["answers"][0]]}, "0 correct options"),
    ({"answers": [{**GOOD["answers"][0], "answer": "y"}, GOOD["answers"][1]]}, "not unique"),
    ({"explanation": ""}, "explanation"),
    ({"difficulty": "medium"}, "'medium' is not one of"),
    ({"chapter": "03"}, "must belong to bank 'ch02'"),
    ({"type": "many_choice"}, "'type'"),
    ({"colour": "red"}, "'colour'"),
    ({"id": "Q1"}, "must belong to bank 'ch02'"),
    ({"tolerance": {"abs": 1}}, "'tolerance' is not stored"),
    ({"answers": [{**GOOD["answers"][0], "id": "B"}, GOOD["answers"][1]]}, "answers/0/id"),
    ({"answers": [{**GOOD["answers"][0], "id": "right-y"}, GOOD["answers"][1]]}, "ids are not unique"),
    ({"answers": [{k: v for k, v in GOOD["answers"][0].items() if k != "misconception"},
                  GOOD["answers"][1]]}, "must name the 'misconception'"),
    ({"answers": [GOOD["answers"][0], {**GOOD["answers"][1], "misconception": "m"}]},
     "is correct but names a misconception"),
    ({"answers": [GOOD["answers"][0], {**GOOD["answers"][1], "feedback": "正确。"}]},
     "the key's feedback is 正确。+ explanation"),
    ({"numbers": {"3.5": {"guess": "x"}}}, "numbers/3.5"),
    ({"numbers": {"about 3": {"source": "x"}}}, "'about 3' does not match"),
])
def test_malformed_question_is_rejected_naming_file_and_id(tmp_path, change, problem) -> None:
    p = _write(tmp_path, [{**GOOD, **change}])
    with pytest.raises(ValueError) as e:
        load_bank(p)
    msg = str(e.value)
    assert str(p) in msg and problem in msg and "\n" not in msg and len(msg) < 400, msg
    assert change.get("id", "ch02-1") in msg


NUM = {"id": "ch02-1", "kind": "numeric", "difficulty": "easy", "chapter": "02",
       "question": "1+1?", "answer": 2, "tolerance": {"abs": 0.1}, "explanation": "two"}


@pytest.mark.parametrize("change, problem", [
    ({"tolerance": None}, "'tolerance' is a required property"),
    ({"tolerance": {"abs": 0}}, "less than or equal to the minimum of 0"),
    ({"tolerance": {"rel": 1}}, "greater than or equal to the maximum of 1"),
    ({"tolerance": {"pct": 1}}, "'pct'"),
    ({"answer": "2"}, "'2' is not of type 'number'"),
    ({"answers": []}, "'answers' is not stored"),
    ({"formula": "amdahl"}, "'template' is a required property"),
])
def test_malformed_numeric_is_rejected(tmp_path, change, problem) -> None:
    q = {k: v for k, v in {**NUM, **change}.items() if v is not None}
    with pytest.raises(ValueError, match=re.escape(problem)):
        load_bank(_write(tmp_path, [q]))
    q = load_bank(_write(tmp_path, [NUM]))["ch02-1"]
    assert q.raw["answers"][0]["range"] == [1.9, 2.1] and q.raw["type"] == "numeric"


def _seeded(**change) -> dict:
    q = {"id": "ch05-1", "kind": "numeric", "difficulty": "easy", "chapter": "05",
         "template": "f = {{f}}, B = {{B}}: S_p?", "params": {"f": [0.9, 0.8], "B": [8, 16]},
         "defaults": {"f": 0.9, "B": 8}, "formula": "amdahl", "tolerance": {"rel": 0.01},
         "explanation": "S_p = {{answer}}"}
    q.update(change)
    return q


def test_seeded_question_derives_its_default_instance(tmp_path: Path) -> None:
    q = load_bank(_write(tmp_path, [_seeded()], "ch05"))["ch05-1"]
    assert q.raw["question"] == "f = 0.9, B = 8: S_p?"
    assert q.raw["answer"] == pytest.approx(1 / (0.1 + 0.9 / 8))
    assert q.raw["answers"][0]["feedback"] == "正确。S_p = 4.706"
    with pytest.raises(ValueError, match="ch05-1: 'question' is not stored"):
        load_bank(_write(tmp_path, [_seeded(question="stale")], "ch05"))


@pytest.mark.parametrize("change, problem", [
    ({"formula": "nope"}, "unknown formula 'nope'"),
    ({"template": "f = {{f}}: S_p?"}, "template placeholders"),
    ({"params": {"f": [0.9], "B": [8], "x": [1]}, "defaults": {"f": 0.9, "B": 8, "x": 1}},
     "formula 'amdahl' takes"),
    ({"defaults": {"f": 0.5, "B": 8}}, "one of its choices"),
    ({"template": "{{f}} {{B}} {{x}}"}, "template placeholders ['B', 'f', 'x'] are not ['B', 'f']"),
    ({"explanation": "{{g}}"}, "explanation placeholders"),
    ({"params": {"f": [1.0], "B": [8]}, "defaults": {"f": 1.0, "B": 8}, "formula": "amdahl_ceiling"},
     "formula 'amdahl_ceiling' takes"),
])
def test_bad_seeded_question_is_rejected(tmp_path, change, problem) -> None:
    with pytest.raises(ValueError, match=r"ch05\.json: ch05-1: .*" + re.escape(problem)):
        load_bank(_write(tmp_path, [_seeded(**change)], "ch05"))


def test_formula_failing_on_some_parameter_combination_is_rejected(tmp_path: Path) -> None:
    q = _seeded(template="rate {{rate}}, s {{service_ms}}", formula="md1_wait", explanation="w",
                params={"rate": [50, 200], "service_ms": [8]}, defaults={"rate": 50, "service_ms": 8})
    with pytest.raises(ValueError, match="formula fails for .*utilisation < 1"):
        load_bank(_write(tmp_path, [q], "ch05"))


def test_bank_level_problems(tmp_path: Path) -> None:
    bad = tmp_path / "ch02.json"
    bad.write_text("[{", "utf-8")
    with pytest.raises(ValueError, match=r"ch02.json: not valid JSON"):
        load_bank(bad)
    with pytest.raises(ValueError, match="is not of type 'array'"):
        load_bank(_write(tmp_path, {"id": "x"}))
    with pytest.raises(ValueError, match="ch02-1: duplicate id"):
        load_bank(_write(tmp_path, [GOOD, GOOD]))
    with pytest.raises(ValueError, match=r"ch09.json: no such file"):
        load_bank(tmp_path / "ch09.json")
    with pytest.raises(ValueError, match="unknown bank 'chapter2'"):
        load_bank("chapter2")
