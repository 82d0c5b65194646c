"""Build the batchlab book: stage the stored notebooks and docs, then run Sphinx with -W.

Usage: python book/build.py [OUTDIR]   (default build/book). Nothing is executed and nothing is
fetched: the stored notebook outputs are the content; MathJax, theme and search come from the
installed `book` extra.
"""
import copy
import json
import re
import shutil
import string
import subprocess
import sys
from pathlib import Path

from batchlab.quiz.bank import load_bank

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
WIDGET = "application/vnd.jupyter.widget-view+json"
#: Machine-readable outputs for the tests (the figure check), never shown to a reader.
TEST_ONLY_MIME = ("application/vnd.batchlab.figure-check+json",)
LETTERS = string.ascii_uppercase

OPEN_LAB = "[在 JupyterLab 中打开](../docs/open_in_jupyterlab.md)"
ANIM_NOTE = ("> **动画需要 JupyterLab**：这里是一个可播放、可单步、可调参数的交互控件，静态网页无法运行它。"
             "书里显示的是笔记本存储的帧：后面的胶片条就是同一次模拟在四个时刻的画面。"
             "要播放动画，请" + OPEN_LAB + "。")
QUIZ_NOTE = ("> **测验需要 JupyterLab**：这里是可作答、即时反馈的测验控件，静态网页无法运行它。"
             "题目和答案的只读版见[题库](../quiz/bank.md)；要作答，请" + OPEN_LAB + "。")
WIDGET_NOTE = "> **交互控件需要 JupyterLab**：静态网页无法运行它；请" + OPEN_LAB + "。"


def widget_note(source):
    if "Animation" in source or "animation" in source:
        return ANIM_NOTE
    if "quiz" in source:
        return QUIZ_NOTE
    return WIDGET_NOTE
OPEN_NOTE = ("> 本页是 `{path}` 的静态版本（存储的输出，未重新执行）。"
             "要运行代码：[在 JupyterLab 中打开](../docs/open_in_jupyterlab.md)。")


def md_cell(text):
    md_cell.n += 1
    return {"cell_type": "markdown", "id": f"book-note-{md_cell.n}", "metadata": {}, "source": text}


md_cell.n = 0


H2 = re.compile(r"^## (?!\d+\.\d+ )(.+)$", re.M)


def number_sections(cells, chapter):
    """Chapters 00-05 write "## 2.1 …"; give the others the same "N.k" numbers (render only)."""
    sources = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells]
    md = [s for s, c in zip(sources, cells) if c["cell_type"] == "markdown"]
    if any(re.search(rf"^## {chapter}\.\d+ ", s, re.M) for s in md):
        return
    k = 0
    for cell, src in zip(cells, sources):
        if cell["cell_type"] != "markdown":
            continue

        def repl(m):
            nonlocal k
            k += 1
            return f"## {chapter}.{k} {m.group(1)}"
        cell["source"] = H2.sub(repl, src)


ERRATA_ANCHOR = re.compile(r"(appendix_errata\.ipynb#)(E-[A-Za-z0-9-]+)")


def stage_notebook(src, dst, rel, extra_top=""):
    """Copy one notebook: drop widget-view outputs (they need a live kernel), add notes."""
    nb = json.loads(src.read_text(encoding="utf-8"))
    nb.get("metadata", {}).pop("widgets", None)
    cells = []
    for cell in nb["cells"]:
        cell = copy.deepcopy(cell)
        had_widget = False
        if cell["cell_type"] == "code":
            kept = []
            for out in cell.get("outputs", []):
                data = out.get("data", {})
                for mime in TEST_ONLY_MIME:
                    data.pop(mime, None)
                if WIDGET in data:
                    had_widget = True
                    data.pop(WIDGET)
                    data.pop("text/plain", None)
                    if not data:
                        continue
                kept.append(out)
            cell["outputs"] = kept
        elif cell["cell_type"] == "markdown":  # MyST's heading anchors are lower case (JupyterLab keeps the case)
            text = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            cell["source"] = ERRATA_ANCHOR.sub(lambda m: m[1] + m[2].lower(), text)
        cells.append(cell)
        if had_widget:
            src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            cells.append(md_cell(widget_note(src)))
    note = OPEN_NOTE.format(path=rel) + extra_top
    # the note goes right after the title cell so the page title stays the notebook's H1
    cells.insert(1 if cells and cells[0]["cell_type"] == "markdown" else 0, md_cell(note))
    if re.fullmatch(r"notebooks/\d\d_.*", rel):
        number_sections(cells, int(Path(rel).name[:2]))
    nb["cells"] = cells
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")


def quiz_page(banks):
    """The quiz banks as one read-only Markdown page (answers folded)."""
    out = ["# 题库（只读版）", "",
           "这里是 `quiz/*.json` 的全部题目，答案和解析折叠在每题下面。要作答并自动批改，请在 "
           "JupyterLab 中打开 [交互式测验](quiz.ipynb)，或在终端运行 `python -m batchlab.quiz`。", ""]
    for bank in banks:
        items = [q.raw for q in load_bank(bank)]  # each answer is stored once; the bank derives the rest
        title = "原文面试题" if bank.stem == "interview" else f"第 {bank.stem[2:]} 章自测题"
        out += [f"## {title}（`{bank.name}`）", ""]
        for q in items:
            out += [f"### {q['id']} · {q['difficulty']}", "", q["question"], ""]
            if q["kind"] != "numeric":
                for letter, a in zip(LETTERS, q["answers"]):
                    out.append(f"- **{letter}.** {a['answer']}")
                out.append("")
            key = q["answer"] if not isinstance(q["answer"], list) else "、".join(q["answer"])
            if q["kind"] == "numeric":
                tol = q.get("tolerance", {})
                tol_s = f"（±{tol['abs']}）" if "abs" in tol else (f"（±{tol['rel']:.0%}）" if "rel" in tol else "")
                key = f"{key}{tol_s} {q.get('unit', '')}".strip()
            expl = q["explanation"]
            for k, v in {**q.get("defaults", {}), "answer": q["answer"]}.items():
                expl = expl.replace("{{" + k + "}}", str(v))
            out += ["```{admonition} 答案与解析", ":class: dropdown", "", f"**答案：{key}**", "", expl]
            if q.get("erratum"):
                out += ["", f"> **勘误** {q['erratum']}"]
            out += ["```", ""]
    return "\n".join(out) + "\n"


def readme_commands(src_root):
    """The README's two commands (the first ```bash block under "## Two commands"), verbatim."""
    text = (src_root / "README.md").read_text(encoding="utf-8")
    head = text.find("## Two commands")
    start = text.find("```bash", head)
    end = text.find("```", start + 7)
    if head < 0 or start < 0 or end < 0 or "make start" not in text[start:end]:
        sys.exit("book: README.md has no '## Two commands' ```bash block with `make start`")
    return text[start:end + 3]


def stage(src_root, stage_dir):
    if stage_dir.exists():
        shutil.rmtree(stage_dir)
    (stage_dir / "docs").mkdir(parents=True)
    shutil.copy(BOOK / "conf.py", stage_dir / "conf.py")
    shutil.copytree(BOOK / "_static", stage_dir / "_static")
    shutil.copy(BOOK / "open_in_jupyterlab.md", stage_dir / "docs" / "open_in_jupyterlab.md")
    shutil.copy(src_root / "docs" / "classroom.md", stage_dir / "docs" / "classroom.md")
    chapters = sorted((src_root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    labs = sorted((src_root / "labs").glob("lab*.ipynb"))
    appendices = sorted((src_root / "notebooks").glob("appendix_*.ipynb"))
    for nb in [src_root / "notebooks" / "index.ipynb", *chapters, *appendices]:
        rel = f"notebooks/{nb.name}"
        stage_notebook(nb, stage_dir / rel, rel)
    for nb in labs:
        rel = f"labs/{nb.name}"
        sol = src_root / "solutions" / nb.name
        if not sol.exists():
            sys.exit(f"book: {rel} has no solution at solutions/{nb.name}")
        stage_notebook(nb, stage_dir / rel, rel,
                       f"\n>\n> 参考答案：[solutions/{nb.name}](../solutions/{nb.name})。先自己做，再对照。")
        stage_notebook(sol, stage_dir / "solutions" / nb.name, f"solutions/{nb.name}")
    exercises = src_root / "solutions" / "exercises.ipynb"
    if exercises.exists():
        stage_notebook(exercises, stage_dir / "solutions" / exercises.name, f"solutions/{exercises.name}")
    stage_notebook(src_root / "quiz" / "quiz.ipynb", stage_dir / "quiz" / "quiz.ipynb", "quiz/quiz.ipynb")
    banks = sorted((src_root / "quiz").glob("ch*.json")) + [src_root / "quiz" / "interview.json"]
    (stage_dir / "quiz" / "bank.md").write_text(quiz_page(banks), encoding="utf-8")
    toc = ["", "```{toctree}", ":caption: 章节", ":maxdepth: 2", ""]  # the notebooks number their own sections (2.1, 2.2 …)
    toc += [f"{c.stem}" for c in chapters]
    toc += ["```", "", "```{toctree}", ":caption: 附录", ":maxdepth: 1", ""]
    toc += [f"{a.stem}" for a in appendices] + (["../solutions/exercises"] if exercises.exists() else [])
    toc += ["```", "", "```{toctree}", ":caption: 实验（学员版）", ":maxdepth: 1", ""]
    toc += [f"../labs/{lab.stem}" for lab in labs]
    toc += ["```", "", "```{toctree}", ":caption: 测验与讲师", ":maxdepth: 1", ""]
    toc += ["../quiz/bank", "../quiz/quiz", "../docs/classroom", "../docs/open_in_jupyterlab"]
    toc += ["```", "", "```{toctree}", ":hidden:", ":caption: 参考答案", ""]
    toc += [f"../solutions/{lab.stem}" for lab in labs]
    toc += ["```"]
    index = stage_dir / "notebooks" / "index.ipynb"
    nb = json.loads(index.read_text(encoding="utf-8"))
    nb["cells"].insert(2, md_cell("## 两条命令\n\n这本书不用安装就能读。要在自己的机器上运行课程（JupyterLab + 内置的 Triton 服务器）：\n\n"
                                  + readme_commands(src_root)
                                  + "\n\n详见[在 JupyterLab 中打开](../docs/open_in_jupyterlab.md)。"))
    nb["cells"].append(md_cell("\n".join(["## 全书目录", *toc])))
    index.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")


def main(argv):
    out = Path(argv[0]).resolve() if argv else ROOT / "build" / "book"
    stage_dir = out.parent / "book-src"
    stage(ROOT, stage_dir)
    for old in (out, out.parent / "book-doctrees"):
        if old.exists():
            shutil.rmtree(old)
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
           "-d", str(out.parent / "book-doctrees"), str(stage_dir), str(out)]
    rc = subprocess.call(cmd)
    if rc:
        sys.exit(f"book: sphinx-build failed (rc={rc}); warnings are errors")
    # the front page at the site root: a relative redirect to the course map
    (out / "index.html").write_text(
        '<!DOCTYPE html><html lang="zh-CN"><head><meta charset="utf-8">'
        '<meta http-equiv="refresh" content="0; url=notebooks/index.html">'
        '<title>一口锅推理批处理实验课</title></head><body>'
        '<p><a href="notebooks/index.html">课程地图 · 一口锅推理批处理实验课</a></p></body></html>\n',
        encoding="utf-8")
    print(f"book: {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
